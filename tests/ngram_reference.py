"""Line-by-line transcriptions of llama.cpp's n-gram drafters (pinned tree), slow on purpose:
full scans, the whole 2^18-slot hash table, linear key search, 64-bit hashes. The drafters in
``pyllama_spec.speculative.drafters`` replace the scans with indices; these references check
that the replacement changes nothing. Each takes the committed history ``inp`` (llama.cpp's
``prompt_tgt``) and ``id_last`` at every draft, as ``common_speculative_draft`` does."""
from __future__ import annotations

from pyllama_spec.speculative.drafters.ngram_cache import stl_order


def simple_draft(tokens, sampled, size_ngram, size_mgram):
    """common/ngram-map.cpp: common_ngram_simple_draft."""
    cur_len = len(tokens)
    n_draft_min, n_draft_max = size_ngram, size_mgram
    if cur_len <= n_draft_min + n_draft_max + 1:
        return []
    pattern = [tokens[j] for j in range(cur_len - n_draft_min + 1, cur_len)] + [sampled]
    match_pos = 0
    j = cur_len - n_draft_min - 1
    while j > 0:
        if all(tokens[j + k] == pattern[k] for k in range(len(pattern))):
            match_pos = j
            break
        j -= 1
    if match_pos == 0:
        return []
    copy_max = min(n_draft_max, cur_len - (match_pos + n_draft_min))
    if copy_max < n_draft_min:
        return []
    return [tokens[match_pos + n_draft_min + j] for j in range(copy_max)]


def _map_hash(tokens, start, length):
    h = 0
    for i in range(length):
        h = (h * 2654435761 + tokens[start + i]) & 0xFFFFFFFF
    return h


class RefMap:
    """common/ngram-map.cpp: common_ngram_map + _begin (fresh map) / _draft / _accept."""

    def __init__(self, size_key, size_value, key_only, min_hits):
        self.size_key, self.size_value, self.key_only, self.min_hits = size_key, size_value, key_only, min_hits
        self.keys = []  # dicts: key_idx, stat_idx, key_num, values: [[value_idx, value_num, n_accepted]] * 4
        self.key_map = [0] * 262144
        self.key_map_last_idx = 0
        self.size_last_begin = 0
        self.idx_last_check = 0
        self.last_draft_created = False
        self.last_draft_key_idx = 0
        self.last_draft_value_idx = 0

    def begin(self, tokens):
        self.idx_last_check = self.size_last_begin = len(tokens)

    def draft(self, inp, sampled):
        self.last_draft_created = False
        self.last_draft_key_idx = 0
        self.last_draft_value_idx = 0
        cur_len, n, m = len(inp), self.size_key, self.size_value
        if cur_len < 2 * n + m:
            return []
        self.idx_last_check = cur_len
        key_tokens = [inp[j] for j in range(cur_len - n + 1, cur_len)] + [sampled]
        match_pos = 0
        idx_key = self.key_map[_map_hash(key_tokens, 0, n) % len(self.key_map)]
        if idx_key != 0 and idx_key < cur_len - n - m - 1:
            if all(inp[idx_key + k] == key_tokens[k] for k in range(n)):
                match_pos = idx_key
        if match_pos == 0 and self.size_last_begin > n + m + 1:
            j = self.size_last_begin - n - m - 1
            while j > self.key_map_last_idx:
                if all(inp[j + k] == key_tokens[k] for k in range(n)):
                    match_pos = j
                    break
                j -= 1
        if match_pos == 0:
            j = cur_len - n - m - 1
            while j > self.size_last_begin and j > self.key_map_last_idx:
                if all(inp[j + k] == key_tokens[k] for k in range(n)):
                    match_pos = j
                    break
                j -= 1
        if self.size_last_begin > n + m + 1:
            j = self.size_last_begin - n - m - 1
            while j > self.key_map_last_idx:
                h = _map_hash(inp, j, n) % len(self.key_map)
                if self.key_map[h] == 0:
                    self.key_map[h] = j
                j -= 1
        j = cur_len - n - m - 1
        while j > self.size_last_begin and j > self.key_map_last_idx:
            h = _map_hash(inp, j, n) % len(self.key_map)
            if self.key_map[h] == 0:
                self.key_map[h] = j
            j -= 1
        self.key_map_last_idx = max(cur_len - n - m - 1, self.key_map_last_idx)
        if match_pos == 0:
            return []
        key_offset = len(self.keys)
        for i, k in enumerate(self.keys):
            if all(inp[k["key_idx"] + j] == key_tokens[j] for j in range(n)):
                key_offset = i
                break
        if key_offset == len(self.keys):
            self.keys.append({"key_idx": match_pos, "stat_idx": 0, "key_num": 0,
                              "values": [[0, 0, m] for _ in range(4)]})
        curr = self.keys[key_offset]
        curr["key_num"] = min(curr["key_num"] + 1, 16380)
        if self.key_only:
            n_draft = min(m, curr["values"][0][2])
            self.last_draft_created, self.last_draft_key_idx, self.last_draft_value_idx = True, key_offset, 0
            return [inp[match_pos + n + i] for i in range(n_draft)]
        if curr["key_num"] < self.min_hits:
            return []
        for i in range(curr["stat_idx"], match_pos + 1):
            if not all(inp[i + k] == key_tokens[k] for k in range(n)):
                continue
            b = i + n
            idx_value = -1
            for v in range(4):
                vb = curr["values"][v][0]
                if vb == 0:
                    curr["values"][v] = [b, 0, m]
                    idx_value = v
                    break
                if all(inp[b + j] == inp[vb + j] for j in range(m)):
                    idx_value = v
                    break
            if idx_value >= 0:
                curr["values"][idx_value][1] = min(curr["values"][idx_value][1] + 1, 16380)
        curr["stat_idx"] = match_pos
        max_occur, slot_max = 0, 0
        for v in range(4):
            if curr["values"][v][1] > max_occur:
                max_occur, slot_max = curr["values"][v][1], v
        sum_occur = sum(curr["values"][v][1] for v in range(4) if v != slot_max)
        if sum_occur > 0 and max_occur < 2 * sum_occur:
            return []
        n_draft = min(m, curr["values"][slot_max][2])
        self.last_draft_created, self.last_draft_key_idx, self.last_draft_value_idx = True, key_offset, slot_max
        return [inp[match_pos + n + i] for i in range(n_draft)]

    def accept(self, n_accepted):
        if self.last_draft_created:
            self.keys[self.last_draft_key_idx]["values"][self.last_draft_value_idx][2] = n_accepted


class RefMod:
    """common/ngram-mod.cpp + common_speculative_impl_ngram_mod (one sequence)."""

    def __init__(self, n_match, n_max, n_min):
        self.n, self.n_max, self.n_min = n_match, n_max, n_min
        self.entries = {}  # of the 4 Mi slots, the used ones
        self.i_last = self.n_draft_last = self.n_low = 0

    def idx(self, tokens):
        res = 0
        for t in tokens:
            res = (res * 6364136223846793005 + t) % (1 << 64)
        return res % (4 * 1024 * 1024)

    def add(self, tokens):
        self.entries[self.idx(tokens[:self.n])] = tokens[self.n]

    def begin(self, prompt):
        self.i_last = self.n_draft_last = 0
        if len(prompt) < self.n:
            return
        for i in range(len(prompt) - self.n):
            self.add(prompt[i:])
        self.i_last = len(prompt) - self.n
        if len(self.entries) / (4 * 1024 * 1024) > 0.25:
            self.entries.clear()

    def draft(self, prompt, id_last):
        self.n_draft_last = 0
        cur_len, n = len(prompt), self.n
        if cur_len < n:
            return []
        if self.i_last + 32 < cur_len:
            for i in range(self.i_last, cur_len - n):
                self.add(prompt[i:])
            self.i_last = cur_len - n
        result = [prompt[cur_len - n + 1 + i] for i in range(n - 1)] + [id_last]
        for i in range(self.n_max):
            token = self.entries.get(self.idx(result[i:i + n]), -1)
            if token == -1:
                if i < self.n_min:
                    return []
                break
            result.append(token)
        out = result[n:]
        self.n_draft_last = len(out)
        return out

    def accept(self, n_accepted):
        if self.n_draft_last > 0:
            if n_accepted / self.n_draft_last < 0.25:
                self.n_low += 1
                if self.n_low >= 5:
                    self.entries.clear()
                    self.n_low = 0
                    self.i_last = 0
            else:
                self.n_low = 0


class RefCache:
    """common/ngram-cache.cpp (update / draft, context cache only) +
    common_speculative_impl_ngram_cache::draft_one; a part is a dict in insertion order,
    iterated in libstdc++'s order."""
    LAX = ([2, 2, 1, 1], [66, 50, 50, 50])

    def __init__(self, n_draft=8):
        self.n_draft = n_draft
        self.ctx = {}
        self.cache_size = 0

    def begin(self, prompt):
        pass

    def update(self, inp):
        for size in range(1, 5):
            for i in range(max(0, size), len(inp)):
                key = tuple(inp[i - size:i])
                part = self.ctx.setdefault(key, {})
                part[inp[i]] = part.get(inp[i], 0) + 1

    def draft(self, prompt, id_last):
        if self.cache_size < len(prompt) + 1:
            self.update(list(prompt[self.cache_size:]) + [id_last])
            self.cache_size = len(prompt) + 1
        inp = list(prompt) + [id_last]
        draft = [id_last]
        if len(inp) < 2:
            return []
        while len(draft) - 1 < self.n_draft:
            seq = inp + draft[1:]
            ngrams = [tuple(seq[len(seq) - s:]) if s <= len(seq) else None for s in range(1, 5)]
            tok = None
            for i in range(3, -1, -1):
                if ngrams[i] is None or ngrams[i] not in self.ctx:
                    continue
                part = self.ctx[ngrams[i]]
                best, max_c, total = None, 0, 0
                for t in stl_order(list(part)):
                    if part[t] > max_c:
                        best, max_c = t, part[t]
                    total += part[t]
                if total < self.LAX[0][i] or 100 * max_c < self.LAX[1][i] * total:
                    continue
                tok = best
                break
            if tok is None:
                break
            draft.append(tok)
        return draft[1:]

    def accept(self, n_accepted):
        pass
