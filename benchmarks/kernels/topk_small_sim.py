"""The algorithm of vendor/patches/0012-cuda-top-k-small-k, simulated on the host (not its CUDA code): each
thread's K best (value, column) kept sorted, k rounds of a block-wide max over the threads' heads, rows split
over several blocks whose candidates a second pass merges. Checked against a stable descending sort's first k
(ties to the lower column) on random rows with ties and -inf, with odd thread counts and chunk sizes.

    python benchmarks/kernels/topk_small_sim.py
"""
import random

INF = float("inf")
IMAX = 2**31 - 1


def better(av: float, ai: int, bv: float, bi: int) -> bool:
    return av > bv or (av == bv and ai < bi)


def insert(v: list[float], ix: list[int], x: float, j: int) -> None:
    if not better(x, j, v[-1], ix[-1]):
        return
    for p in range(len(v)):
        if better(x, j, v[p], ix[p]):
            v[p], x = x, v[p]
            ix[p], j = j, ix[p]


def block_select(lists: list[tuple[list[float], list[int]]], k: int) -> list[tuple[float, int]]:
    out = []
    for _ in range(k):
        bv, bi = -INF, IMAX
        for v, ix in lists:
            if better(v[0], ix[0], bv, bi):
                bv, bi = v[0], ix[0]
        out.append((bv, bi))
        for v, ix in lists:
            if ix[0] == bi:  # the owner drops its head
                del v[0], ix[0]
                v.append(-INF)
                ix.append(IMAX)
    return out


def top_k(x: list[float], k: int, nt: int, chunk_max: int, max_split: int = 5) -> list[int]:
    kk = 8 if k <= 8 else 16 if k <= 16 else 32
    x = [-INF if v != v else v for v in x]  # the kernel's fmaxf(x, -inf): a NaN ranks as -inf
    n = len(x)
    n_split = max(1, min(max_split, (n + chunk_max - 1) // chunk_max))
    chunk = (n + n_split - 1) // n_split
    cands: list[tuple[float, int]] = []
    for s in range(n_split):
        lists = [([-INF] * kk, [IMAX] * kk) for _ in range(nt)]
        for t in range(nt):
            for j in range(s * chunk + t, min(n, (s + 1) * chunk), nt):
                insert(*lists[t], x[j], j)
        cands += block_select(lists, k)
    if n_split == 1:
        return [i for _, i in cands]
    lists = [([-INF] * kk, [IMAX] * kk) for _ in range(4)]
    for j, (cv, ci) in enumerate(cands):
        insert(*lists[j % 4], cv, ci)
    return [i for _, i in block_select(lists, k)]


def main() -> None:
    rng = random.Random(1)
    for trial in range(3000):
        n = rng.randint(1, 300)
        k = rng.randint(1, min(n, 32))
        pick = [lambda: rng.choice([0.0, 1.0, 2.0, -INF]), lambda: rng.gauss(0, 1),
                lambda: float(rng.randint(-3, 3))][trial % 3]
        x = [pick() for _ in range(n)]
        got = top_k(x, k, nt=rng.choice([1, 4, 8, 32]), chunk_max=rng.choice([5, 37, 64, 1000]))
        want = sorted(range(n), key=lambda j: (-x[j], j))[:k]
        assert got == want, (n, k, got, want)
    for n in (1, 2, 17, 300):  # NaN rows (a broken model's logits): k valid, distinct columns, never the sentinel
        for x in ([float("nan")] * n, [float("nan")] * (n - 1) + [1.0]):
            k = min(n, 10)
            got = top_k(x, k, nt=4, chunk_max=37)
            assert len(set(got)) == k and all(0 <= i < n for i in got), (n, got)
    print("ok: 3000 random rows (ties, -inf): the first k of a stable descending sort; NaN rows: valid columns")


if __name__ == "__main__":
    main()
