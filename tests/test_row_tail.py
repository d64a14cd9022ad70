"""DFlash's kept rows for constant-shape injection (``_RowTail``): chunks kept by reference, cut and
picked without copying the block — checked against a plain list of rows under random operations."""
import numpy as np

from pyllama_spec.speculative.drafters.dflash import _RowTail


def test_row_tail_against_a_list_of_rows():
    rng = np.random.default_rng(0)
    for _ in range(300):
        cap = int(rng.integers(1, 9))
        tail = _RowTail(cap)
        ref: list[list[tuple[int, np.ndarray]]] = []  # the run's chunks of (position, row)
        nxt = 0
        for _ in range(30):
            op = int(rng.integers(3))
            if op == 0 or not ref:  # append a chunk, following or (sometimes) starting a new run
                if rng.random() < 0.15:
                    nxt += int(rng.integers(1, 4))
                    ref = []
                n = int(rng.integers(1, 5))
                pos = np.arange(nxt, nxt + n, dtype=np.int32)
                feats = rng.standard_normal((n, 3)).astype(np.float32)
                tail.add(feats, pos)
                ref.append([(int(p), f.copy()) for p, f in zip(pos, feats)])
                while sum(map(len, ref)) - len(ref[0]) >= cap:  # whole chunks older than the last cap rows go
                    ref.pop(0)
                pos[:] = -1  # (positions are copied: the loop's array may be reused)
                nxt += n
            elif op == 1:  # a rollback to n
                n = int(rng.integers(0, nxt + 1))
                left = tail.cut(n)
                ref = [c for c in ([(p, f) for p, f in c if p < n] for c in ref) if c]
                nxt = min(nxt, n)
                assert left == bool(ref)
                if not left:
                    tail = _RowTail(cap)
            rows = [r for c in ref for r in c]
            p = int(rng.integers(0, nxt + 2))  # the rows a constant-shape decode injects again before p
            m = int(rng.integers(0, cap + 1))
            got = tail.before(p, m)
            want = [(q, f) for q, f in rows if q < p][-m:] if m else []
            if not want:
                assert got is None
            else:
                assert got is not None
                np.testing.assert_array_equal(got[1], [q for q, _ in want])
                np.testing.assert_array_equal(got[0], np.stack([f for _, f in want]))
            if rows:
                assert len(tail) == len(rows)
                f, q = tail.rows()
                np.testing.assert_array_equal(q, [r[0] for r in rows[-cap:]])
                np.testing.assert_array_equal(f, np.stack([r[1] for r in rows[-cap:]]))
