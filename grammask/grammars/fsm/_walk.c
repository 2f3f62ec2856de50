/* Native hot loops of grammask's fsm backend: the same contracts as the pure-Python references in
 * walk.py (read that module's docstrings first). Arrays arrive through the buffer protocol, so the
 * extension needs no NumPy headers; the Python side checks dtypes and contiguity. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define DEAD 0
#define UNKNOWN (-1)
#define ACCEPTING 1
#define HAS_CALLS 2
#define LIVE_KNOWN 4
#define LIVE 8
#define EXIT (ACCEPTING | HAS_CALLS)
#define STATUS_DEAD 0
#define STATUS_END 1
#define STATUS_PENDING 2
#define LIVENESS_REQUEST 256
#define STATUS_LIMIT 3
#define MAX_EPSILON_MOVES 64
#define MAX_WALK_STEPS (1 << 20)
#define MAX_DEPTH 4096

/* ------------------------------------------------------------------ growable int arrays */

typedef struct {
    char *data;
    Py_ssize_t used, capacity, item;
} Growable;

static int grow_push(Growable *g, const void *value) {
    if (g->used == g->capacity) {
        Py_ssize_t capacity = g->capacity ? 2 * g->capacity : 64;
        char *data = PyMem_Realloc(g->data, capacity * g->item);
        if (!data) {
            PyErr_NoMemory();
            return -1;
        }
        g->data = data;
        g->capacity = capacity;
    }
    memcpy(g->data + g->used * g->item, value, g->item);
    g->used++;
    return 0;
}

static PyObject *grow_to_bytes(Growable *g) {
    PyObject *out = PyBytes_FromStringAndSize(g->data ? g->data : "", g->used * g->item);
    PyMem_Free(g->data);
    g->data = NULL;
    return out;
}

/* ------------------------------------------------------------------ vocabulary */

static PyObject *first_outside(PyObject *self, PyObject *args) {
    Py_buffer flat, begins, ends, member, out;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*", &flat, &begins, &ends, &member, &out)) return NULL;
    const uint8_t *bytes = flat.buf, *in = member.buf;
    const int64_t *b = begins.buf, *e = ends.buf;
    int64_t *o = out.buf;
    Py_ssize_t n = begins.len / 8;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t p = b[i];
        while (p < e[i] && in[bytes[p]]) p++;
        o[i] = p;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&flat); PyBuffer_Release(&begins); PyBuffer_Release(&ends);
    PyBuffer_Release(&member); PyBuffer_Release(&out);
    Py_RETURN_NONE;
}

/* Length of the valid UTF-8 multi-byte character at p (2..4), or 0 when the bytes there do not
 * start one that ends before `end` (a bad lead, a bad or missing continuation, a surrogate). */
static int utf8_char(const uint8_t *bytes, int64_t p, int64_t end) {
    uint8_t lead = bytes[p];
    int length;
    uint8_t low = 0x80, high = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) length = 2;
    else if (lead >= 0xE0 && lead <= 0xEF) {
        length = 3;
        if (lead == 0xE0) low = 0xA0;
        if (lead == 0xED) high = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        length = 4;
        if (lead == 0xF0) low = 0x90;
        if (lead == 0xF4) high = 0x8F;
    } else
        return 0;
    if (p + length > end) return 0;
    if (bytes[p + 1] < low || bytes[p + 1] > high) return 0;
    for (int k = 2; k < length; k++)
        if (bytes[p + k] < 0x80 || bytes[p + k] > 0xBF) return 0;
    return length;
}

static PyObject *first_outside_text(PyObject *self, PyObject *args) {
    Py_buffer flat, begins, ends, member, out;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*", &flat, &begins, &ends, &member, &out)) return NULL;
    const uint8_t *bytes = flat.buf, *in = member.buf;
    const int64_t *b = begins.buf, *e = ends.buf;
    int64_t *o = out.buf;
    Py_ssize_t n = begins.len / 8;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t p = b[i], end = e[i];
        while (p < end) {
            if (bytes[p] < 0x80) {
                if (!in[bytes[p]]) break;
                p++;
            } else {
                int length = utf8_char(bytes, p, end);
                if (!length) break;
                p += length;
            }
        }
        o[i] = p;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&flat); PyBuffer_Release(&begins); PyBuffer_Release(&ends);
    PyBuffer_Release(&member); PyBuffer_Release(&out);
    Py_RETURN_NONE;
}

/* OR the bits of the `n` ids `t` into the packed row `w` of `width` words (ids outside it ignored). */
static void or_ids(uint32_t *w, Py_ssize_t width, const int32_t *t, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t id = t[i];
        if (id >= 0 && (id >> 5) < width) w[id >> 5] |= (uint32_t)1 << (id & 31);
    }
}

static PyObject *set_bits(PyObject *self, PyObject *args) {
    Py_buffer words, ids;
    if (!PyArg_ParseTuple(args, "w*y*", &words, &ids)) return NULL;
    or_ids(words.buf, words.len / 4, ids.buf, ids.len / 4);
    PyBuffer_Release(&words); PyBuffer_Release(&ids);
    Py_RETURN_NONE;
}

static PyObject *clear_bits(PyObject *self, PyObject *args) {
    Py_buffer words, ids;
    if (!PyArg_ParseTuple(args, "w*y*", &words, &ids)) return NULL;
    uint32_t *w = words.buf;
    const int32_t *t = ids.buf;
    Py_ssize_t width = words.len / 4;
    for (Py_ssize_t i = 0; i < ids.len / 4; i++)
        if (t[i] >= 0 && (t[i] >> 5) < width) w[t[i] >> 5] &= ~((uint32_t)1 << (t[i] & 31));
    PyBuffer_Release(&words); PyBuffer_Release(&ids);
    Py_RETURN_NONE;
}

/* fill_row(target, row): write a held row into a packed mask row `target` (int32 words): `row` is
 * either packed words of the same width (copied) or, shorter, the int32 ids of its few tokens
 * (the target is cleared, then their bits set). One call on every mask fill. */
static PyObject *fill_row(PyObject *self, PyObject *args) {
    Py_buffer target, row;
    if (!PyArg_ParseTuple(args, "w*y*", &target, &row)) return NULL;
    if (row.len == target.len) {
        memcpy(target.buf, row.buf, target.len);
    } else {
        memset(target.buf, 0, target.len);
        or_ids(target.buf, target.len / 4, row.buf, row.len / 4);
    }
    PyBuffer_Release(&target); PyBuffer_Release(&row);
    Py_RETURN_NONE;
}

/* fill_union(target, rows) -> None: write into the packed mask row `target` (int32 words) the
 * union of the held rows of the sequence `rows`, each packed words of the same width (OR-ed) or,
 * shorter, the int32 ids of a few tokens (their bits set). One call for a position written from
 * its stacks' rows, in place of a row built, interned and then copied. */
static PyObject *fill_union(PyObject *self, PyObject *args) {
    Py_buffer target;
    PyObject *rows;
    if (!PyArg_ParseTuple(args, "w*O", &target, &rows)) return NULL;
    PyObject *seq = PySequence_Fast(rows, "fill_union: rows must be a sequence");
    if (seq == NULL) {
        PyBuffer_Release(&target);
        return NULL;
    }
    uint32_t *w = target.buf;
    Py_ssize_t width = target.len / 4;
    memset(w, 0, target.len);
    for (Py_ssize_t r = 0; r < PySequence_Fast_GET_SIZE(seq); r++) {
        Py_buffer row;
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, r), &row, PyBUF_SIMPLE) < 0) {
            Py_DECREF(seq); PyBuffer_Release(&target);
            return NULL;
        }
        const uint32_t *words = row.buf;
        if (row.len == target.len) {
            for (Py_ssize_t i = 0; i < width; i++) w[i] |= words[i];
        } else {
            or_ids(w, width, row.buf, row.len / 4);
        }
        PyBuffer_Release(&row);
    }
    Py_DECREF(seq); PyBuffer_Release(&target);
    Py_RETURN_NONE;
}

static int compare_ids(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* union_ids(rows, out) -> count: write the distinct ids of the int32 arrays of the tuple `rows`,
 * ascending, into `out` (int32, room for all of them), and return how many there are. Rows hold a
 * few hundred ids at most: a bitmap over the ids' range sorts them where the range is narrow,
 * qsort where a few ids spread over the vocabulary. */
static PyObject *union_ids(PyObject *self, PyObject *args) {
    PyObject *rows;
    Py_buffer out;
    if (!PyArg_ParseTuple(args, "O!w*", &PyTuple_Type, &rows, &out)) return NULL;
    int32_t *o = out.buf;
    Py_ssize_t room = out.len / 4, total = 0;
    for (Py_ssize_t r = 0; r < PyTuple_GET_SIZE(rows); r++) {
        Py_buffer row;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(rows, r), &row, PyBUF_SIMPLE) < 0) {
            PyBuffer_Release(&out);
            return NULL;
        }
        Py_ssize_t n = row.len / 4;
        if (total + n > room) {
            PyBuffer_Release(&row); PyBuffer_Release(&out);
            PyErr_SetString(PyExc_ValueError, "union_ids: out has less room than the rows' ids");
            return NULL;
        }
        memcpy(o + total, row.buf, n * 4);
        total += n;
        PyBuffer_Release(&row);
    }
    int32_t low = INT32_MAX, high = -1;
    for (Py_ssize_t i = 0; i < total; i++) {
        if (o[i] < 0) {
            PyBuffer_Release(&out);
            PyErr_SetString(PyExc_ValueError, "union_ids: a negative id");
            return NULL;
        }
        if (o[i] < low) low = o[i];
        if (o[i] > high) high = o[i];
    }
    Py_ssize_t count = 0;
    if (total && ((Py_ssize_t)high - low) / 32 + 1 > 4 * total) {
        /* Few ids over a wide range (a position's rows inside a key): sorted in place, where a
         * bitmap of the range cost ~7 us to clear and scan. */
        qsort(o, (size_t)total, sizeof(int32_t), compare_ids);
        for (Py_ssize_t i = 0; i < total; i++)
            if (!count || o[i] != o[count - 1]) o[count++] = o[i];
    } else if (total) {
        Py_ssize_t width = ((Py_ssize_t)high - low) / 32 + 1;
        uint32_t *bits = PyMem_Calloc(width, 4);
        if (bits == NULL) {
            PyBuffer_Release(&out);
            return PyErr_NoMemory();
        }
        for (Py_ssize_t i = 0; i < total; i++) bits[(o[i] - low) >> 5] |= (uint32_t)1 << ((o[i] - low) & 31);
        for (Py_ssize_t i = 0; i < width; i++) {
            for (uint32_t word = bits[i]; word; word &= word - 1) o[count++] = (int32_t)(low + i * 32 + __builtin_ctz(word));
        }
        PyMem_Free(bits);
    }
    PyBuffer_Release(&out);
    return PyLong_FromSsize_t(count);
}

/* count_bits(words) -> the bits set in a packed row. */
static PyObject *count_bits(PyObject *self, PyObject *args) {
    Py_buffer words;
    if (!PyArg_ParseTuple(args, "y*", &words)) return NULL;
    const uint32_t *w = words.buf;
    Py_ssize_t width = words.len / 4, count = 0;
    for (Py_ssize_t i = 0; i < width; i++) count += __builtin_popcount(w[i]);
    PyBuffer_Release(&words);
    return PyLong_FromSsize_t(count);
}

/* unpack_bits(words, out): write the ids of the bits set in a packed row into `out` (int32,
 * ascending; as many as fit), return how many there are. */
static PyObject *unpack_bits(PyObject *self, PyObject *args) {
    Py_buffer words, out;
    if (!PyArg_ParseTuple(args, "y*w*", &words, &out)) return NULL;
    const uint32_t *w = words.buf;
    int32_t *o = out.buf;
    Py_ssize_t width = words.len / 4, room = out.len / 4, count = 0;
    for (Py_ssize_t i = 0; i < width; i++) {
        uint32_t word = w[i];
        while (word) {
            if (count < room) o[count] = (int32_t)(i * 32 + __builtin_ctz(word));
            count++;
            word &= word - 1;
        }
    }
    PyBuffer_Release(&words); PyBuffer_Release(&out);
    return PyLong_FromSsize_t(count);
}

#define PREFIX_INDEX_SIZE (256 * 257 + 1)

/* The key of sorted token i at byte k: that byte, or -1 when the token has only k bytes (it
 * sorts before every longer token sharing its first k bytes). */
static inline int token_key(const uint8_t *flat, const int64_t *begins, const int32_t *lengths, Py_ssize_t i, Py_ssize_t k) {
    return lengths[i] > k ? flat[begins[i] + k] : -1;
}

/* First index in [low, high) whose key at byte k is above `below` (keys rise along the range). */
static Py_ssize_t key_bound(const uint8_t *flat, const int64_t *begins, const int32_t *lengths, Py_ssize_t low, Py_ssize_t high, Py_ssize_t k, int below) {
    while (low < high) {
        Py_ssize_t middle = low + (high - low) / 2;
        if (token_key(flat, begins, lengths, middle, k) > below) high = middle;
        else low = middle + 1;
    }
    return low;
}

/* Push onto `shorter` the tokens of [low, high) that have exactly `length` bytes (they sort first). */
static int push_of_length(Growable *shorter, const int32_t *n, Py_ssize_t low, Py_ssize_t high, Py_ssize_t length) {
    for (Py_ssize_t i = low; i < high && n[i] == length; i++) {
        int64_t index = i;
        if (grow_push(shorter, &index) < 0) return -1;
    }
    return 0;
}

/* Search the sorted tokens for data[0:len): push onto `shorter` the indices of its proper prefixes
 * (shortest first), set [*low, *split) to the tokens equal to it and [*split, *high) to the longer
 * ones that start with it. With `starts` (PREFIX_INDEX_SIZE int32, see walk.prefix_index), the
 * ranges of data's first one and two bytes are read from it, not searched: the first searches
 * span the whole vocabulary, and each of their steps is a cache miss. 0, or -1 out of memory. */
static int prefix_search(const uint8_t *f, const int64_t *b, const int32_t *n, Py_ssize_t count, const int32_t *starts,
                         const uint8_t *d, Py_ssize_t len, Growable *shorter, Py_ssize_t *low_out, Py_ssize_t *split_out,
                         Py_ssize_t *high_out) {
    Py_ssize_t low = 0, high = count, k = 0;
    int failed = 0;
    if (starts && len >= 1) {
        Py_ssize_t block = (Py_ssize_t)d[0] * 257; /* key of a token: 257 * first byte + (second byte + 1, or 0) */
        low = starts[block];
        high = starts[block + 257];
        k = 1;
        if (len >= 2) {
            failed = push_of_length(shorter, n, low, high, 1) < 0;
            low = starts[block + d[1] + 1];
            high = starts[block + d[1] + 2];
            k = 2;
            if (!failed && len > 2) failed = push_of_length(shorter, n, low, high, 2) < 0;
        }
    }
    for (; !failed && k < len && low < high; k++) {
        int byte = d[k];
        /* [low, high): the tokens that start with data[:k], sorted; narrow to byte k. */
        low = key_bound(f, b, n, low, high, k, byte - 1);
        high = key_bound(f, b, n, low, high, k, byte);
        if (k + 1 == len) break;
        failed = push_of_length(shorter, n, low, high, k + 1) < 0;
    }
    Py_ssize_t split = low;
    while (split < high && n[split] == len) split++;
    *low_out = low, *split_out = split, *high_out = high;
    return failed ? -1 : 0;
}

/* prefix_range(flat, begins, lengths, data[, index]) -> (shorter, low, split, high): one
 * prefix_search, `shorter` as int64 bytes. */
static PyObject *prefix_range(PyObject *self, PyObject *args) {
    Py_buffer flat, begins, lengths, data, index = {0};
    if (!PyArg_ParseTuple(args, "y*y*y*y*|y*", &flat, &begins, &lengths, &data, &index)) return NULL;
    Growable shorter = {NULL, 0, 0, sizeof(int64_t)};
    Py_ssize_t low = 0, split = 0, high = 0;
    int failed = 0;
    if (index.buf && index.len != PREFIX_INDEX_SIZE * 4) {
        PyErr_SetString(PyExc_ValueError, "prefix_range: the index has the wrong size");
        failed = 1;
    } else {
        failed = prefix_search(flat.buf, begins.buf, lengths.buf, lengths.len / 4, index.buf, data.buf, data.len, &shorter, &low,
                               &split, &high) < 0;
    }
    PyBuffer_Release(&flat); PyBuffer_Release(&begins); PyBuffer_Release(&lengths); PyBuffer_Release(&data);
    if (index.buf) PyBuffer_Release(&index);
    if (failed) {
        PyMem_Free(shorter.data);
        return NULL;
    }
    PyObject *found = grow_to_bytes(&shorter);
    if (!found) return NULL;
    return Py_BuildValue("Nnnn", found, low, split, high);
}

/* run_prefixes(flat, begins, lengths, index, order, token_ids, data, with_exact) -> (ids, offsets,
 * longer): prefix_search for every suffix data[k:] of a literal at once. The token ids (order: the
 * sorted index's vocabulary positions, token_ids: their ids) of the proper prefixes of data[k:],
 * and of data[k:] itself with `with_exact`, are ids[offsets[k]:offsets[k + 1]] (int32, int64
 * offsets); longer[k] (int64) counts the tokens that start with data[k:] and go on. */
static PyObject *run_prefixes(PyObject *self, PyObject *args) {
    Py_buffer flat, begins, lengths, index, order, token_ids, data;
    int with_exact;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*p", &flat, &begins, &lengths, &index, &order, &token_ids, &data, &with_exact))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t len = data.len, count = lengths.len / 4, num_ids = token_ids.len / 4;
    Growable found = {NULL, 0, 0, sizeof(int64_t)}, ids = {NULL, 0, 0, sizeof(int32_t)};
    PyObject *offsets = PyBytes_FromStringAndSize(NULL, (len + 1) * sizeof(int64_t));
    PyObject *longer = PyBytes_FromStringAndSize(NULL, len * sizeof(int64_t));
    if (!offsets || !longer) goto done;
    if (index.len != PREFIX_INDEX_SIZE * 4 || order.len / 8 != count) {
        PyErr_SetString(PyExc_ValueError, "run_prefixes: the index or the order has the wrong size");
        goto done;
    }
    const int64_t *o = order.buf;
    const int32_t *t = token_ids.buf;
    int64_t *offs = (int64_t *)PyBytes_AS_STRING(offsets), *more = (int64_t *)PyBytes_AS_STRING(longer);
    offs[0] = 0;
    for (Py_ssize_t k = 0; k < len; k++) {
        Py_ssize_t low, split, high;
        found.used = 0;
        if (prefix_search(flat.buf, begins.buf, lengths.buf, count, index.buf, (const uint8_t *)data.buf + k, len - k, &found, &low,
                          &split, &high) < 0)
            goto done;
        if (with_exact)
            for (Py_ssize_t i = low; i < split; i++) {
                int64_t at = i;
                if (grow_push(&found, &at) < 0) goto done;
            }
        for (Py_ssize_t i = 0; i < found.used; i++) {
            int64_t at = ((int64_t *)found.data)[i], position = at >= 0 && at < count ? o[at] : -1;
            if (position < 0 || position >= num_ids) {
                PyErr_SetString(PyExc_ValueError, "run_prefixes: the order names no token");
                goto done;
            }
            int32_t id = t[position];
            if (grow_push(&ids, &id) < 0) goto done;
        }
        offs[k + 1] = (int64_t)ids.used;
        more[k] = (int64_t)(high - split);
    }
    PyObject *packed = grow_to_bytes(&ids);
    if (packed) result = Py_BuildValue("NOO", packed, offsets, longer);
done:
    Py_XDECREF(offsets); Py_XDECREF(longer);
    PyMem_Free(found.data); PyMem_Free(ids.data);
    PyBuffer_Release(&flat); PyBuffer_Release(&begins); PyBuffer_Release(&lengths); PyBuffer_Release(&index);
    PyBuffer_Release(&order); PyBuffer_Release(&token_ids); PyBuffer_Release(&data);
    return result;
}

/* A 64-bit fingerprint of a buffer (equal bytes, equal fingerprints): eight multiply-xor lanes
 * over its 8-byte words, folded. Not cryptographic: the row store confirms a match by content. */
static PyObject *fingerprint(PyObject *self, PyObject *args) {
    Py_buffer buffer;
    if (!PyArg_ParseTuple(args, "y*", &buffer)) return NULL;
    const uint8_t *p = buffer.buf;
    Py_ssize_t n = buffer.len, i = 0;
    const uint64_t k = 0x9E3779B97F4A7C15ull;
    /* Eight independent lanes, so that the multiplies of one step overlap (16 KB: 1.07 us, four
     * lanes took 1.25). */
    uint64_t lane[8] = {k, k ^ 1, k ^ 2, k ^ 3, k ^ 4, k ^ 5, k ^ 6, k ^ 7}, w;
    for (; i + 64 <= n; i += 64) {
        for (int j = 0; j < 8; j++) {
            memcpy(&w, p + i + 8 * j, 8);
            lane[j] = (lane[j] ^ w) * 0xFF51AFD7ED558CCDull;
            lane[j] ^= lane[j] >> 32;
        }
    }
    uint64_t h = (uint64_t)n * k;
    for (int j = 0; j < 8; j++) h = (h ^ lane[j]) * 0xC4CEB9FE1A85EC53ull;
    for (; i < n; i++) h = (h ^ p[i]) * 0x100000001B3ull;
    h ^= h >> 33;
    PyBuffer_Release(&buffer);
    return PyLong_FromUnsignedLongLong(h);
}

static PyObject *same_bytes(PyObject *self, PyObject *args) {
    Py_buffer a, b;
    if (!PyArg_ParseTuple(args, "y*y*", &a, &b)) return NULL;
    int same = a.len == b.len && memcmp(a.buf, b.buf, a.len) == 0;
    PyBuffer_Release(&a); PyBuffer_Release(&b);
    return PyBool_FromLong(same);
}

/* ------------------------------------------------------------------ one rule */

/* Swap `view` for the buffer of `obj` when `obj` is not the object it reads already (an automaton's
 * array replaced by a larger one). 0, or -1 with an exception. */
static int follow_buffer(Py_buffer *view, PyObject *obj) {
    if (view->obj == obj) return 0;
    Py_buffer fresh;
    if (PyObject_GetBuffer(obj, &fresh, PyBUF_SIMPLE) < 0) return -1;
    if (!PyBuffer_IsContiguous(&fresh, 'C')) {
        PyBuffer_Release(&fresh);
        PyErr_SetString(PyExc_ValueError, "walk: an automaton array is not contiguous");
        return -1;
    }
    PyBuffer_Release(view);
    *view = fresh;
    return 0;
}

/* Ask `fill(state, byte)` to compute a transition; it answers `(table, flags)`, the automaton's
 * current arrays, which `table` and `flags` then read. 0, or -1 with an exception. */
static int fill_transition(PyObject *fill, int32_t state, uint8_t byte, Py_buffer *table, Py_buffer *flags) {
    PyObject *arrays = PyObject_CallFunction(fill, "ii", (int)state, (int)byte);
    if (!arrays) return -1;
    int ok = PyTuple_Check(arrays) && PyTuple_GET_SIZE(arrays) == 2;
    if (!ok)
        PyErr_SetString(PyExc_TypeError, "walk_rule: fill must answer (table, flags)");
    else
        ok = follow_buffer(table, PyTuple_GET_ITEM(arrays, 0)) == 0 && follow_buffer(flags, PyTuple_GET_ITEM(arrays, 1)) == 0;
    Py_DECREF(arrays);
    return ok ? 0 : -1;
}

static PyObject *walk_rule(PyObject *self, PyObject *args) {
    Py_buffer table, flags, flat, states, begins, ends, status, finals, resume, columns;
    int exit_mask, width;
    PyObject *fill = Py_None;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*w*w*w*iy*i|O", &table, &flags, &flat, &states, &begins, &ends, &status, &finals,
                          &resume, &exit_mask, &columns, &width, &fill))
        return NULL;
    const int32_t *s = states.buf;
    const uint8_t *bytes = flat.buf, *column = columns.buf;
    const int64_t *b = begins.buf, *e = ends.buf;
    uint8_t *st = status.buf;
    int32_t *fin = finals.buf;
    int64_t *res = resume.buf;
    Py_ssize_t m = states.len / 4;
    Growable exits = {NULL, 0, 0, 3 * sizeof(int64_t)};
    int failed = 0;
    for (Py_ssize_t i = 0; i < m && !failed; i++) {
        int32_t state = s[i];
        int64_t p = b[i], end = e[i];
        uint8_t outcome = STATUS_END;
        while (p < end) {
            int32_t next = ((const int32_t *)table.buf)[width * (int64_t)state + column[bytes[p]]];
            if (next == UNKNOWN && fill != Py_None) {
                if (fill_transition(fill, state, bytes[p], &table, &flags) < 0) {
                    failed = 1;
                    break;
                }
                next = ((const int32_t *)table.buf)[width * (int64_t)state + column[bytes[p]]];
                if (next == UNKNOWN) {
                    PyErr_SetString(PyExc_RuntimeError, "walk_rule: fill left the transition unknown");
                    failed = 1;
                    break;
                }
            }
            if (next == UNKNOWN) {
                outcome = STATUS_PENDING;
                break;
            }
            state = next;
            p++;
            if (state == DEAD) {
                outcome = STATUS_DEAD;
                break;
            }
            if (p < end && (((const uint8_t *)flags.buf)[state] & exit_mask)) {
                int64_t record[3] = {i, p, state};
                if (grow_push(&exits, record) < 0) {
                    failed = 1;
                    break;
                }
            }
        }
        st[i] = outcome;
        fin[i] = state;
        res[i] = p;
    }
    PyBuffer_Release(&table); PyBuffer_Release(&flags); PyBuffer_Release(&flat); PyBuffer_Release(&states);
    PyBuffer_Release(&begins); PyBuffer_Release(&ends); PyBuffer_Release(&status); PyBuffer_Release(&finals);
    PyBuffer_Release(&resume); PyBuffer_Release(&columns);
    if (failed) {
        PyMem_Free(exits.data);
        return NULL;
    }
    return grow_to_bytes(&exits);
}

/* ------------------------------------------------------------------ pushdown */

typedef struct {
    Py_buffer table, flags, offsets, data, columns; /* columns: [256] uint8, the table column of each byte */
    int width, loaded;
} RuleBuffers;

typedef struct {
    PyObject *rule_tuple; /* borrowed from the caller, or (after `resolve` replaced it) owned */
    int owns_tuple;
    PyObject *resolve; /* None: unknown facts are requested; else called to compute them at once */
    RuleBuffers **rules; /* each taken on first use: a walk reads few of a large grammar's rules */
    Py_ssize_t num_rules;
    const uint8_t *bytes;
    int64_t end;
    int32_t stack[2 * MAX_DEPTH];
    Py_ssize_t depth; /* frames on the stack */
    Growable *requests;
    uint64_t *asked; /* open-addressing set of the requests made (key + 1; 0 is empty) */
    Py_ssize_t asked_capacity, asked_used;
    int failed;
    int64_t steps;
    int64_t reach; /* the furthest byte any path of the current item stood before */
    Py_ssize_t lowest, highest; /* the fewest and the most frames any path of the current item stood on */
    int cut; /* whether some call was not made for want of room on the stack (MAX_DEPTH) */
} Walk;

static uint64_t request_slot(uint64_t key, Py_ssize_t capacity) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return key & (uint64_t)(capacity - 1);
}

/* Whether (rule, state, byte) was asked for already in this call; records it if not. -1: no memory. */
static int asked_before(Walk *w, int32_t rule, int32_t state, int32_t byte) {
    uint64_t key = (((uint64_t)(uint32_t)rule << 41) | ((uint64_t)(uint32_t)state << 9) | (uint64_t)byte) + 1;
    if (2 * (w->asked_used + 1) > w->asked_capacity) {
        Py_ssize_t capacity = w->asked_capacity ? 2 * w->asked_capacity : 256;
        uint64_t *table = PyMem_Calloc(capacity, sizeof(uint64_t));
        if (!table) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < w->asked_capacity; i++) {
            uint64_t old = w->asked[i];
            if (!old) continue;
            uint64_t slot = request_slot(old, capacity);
            while (table[slot]) slot = (slot + 1) & (uint64_t)(capacity - 1);
            table[slot] = old;
        }
        PyMem_Free(w->asked);
        w->asked = table;
        w->asked_capacity = capacity;
    }
    uint64_t slot = request_slot(key, w->asked_capacity);
    while (w->asked[slot]) {
        if (w->asked[slot] == key) return 1;
        slot = (slot + 1) & (uint64_t)(w->asked_capacity - 1);
    }
    w->asked[slot] = key;
    w->asked_used++;
    return 0;
}

/* Ask Python for a transition or a liveness fact, once per call of the walk. */
static int request(Walk *w, int32_t rule, int32_t state, int32_t byte) {
    int32_t record[3] = {rule, state, byte};
    int seen = asked_before(w, rule, state, byte);
    if (seen < 0 || (!seen && grow_push(w->requests, record) < 0)) {
        w->failed = 1;
        return -1;
    }
    return 0;
}

static RuleBuffers *rule_buffers(Walk *w, int32_t rule) {
    RuleBuffers *r = w->rules[rule];
    if (!r) {
        r = w->rules[rule] = PyMem_Calloc(1, sizeof(RuleBuffers));
        if (!r) {
            PyErr_NoMemory();
            w->failed = 1;
            return NULL;
        }
    }
    if (!r->loaded) {
        PyObject *item = PyTuple_GET_ITEM(w->rule_tuple, rule);
        if (!PyTuple_Check(item)) {
            PyErr_Format(PyExc_TypeError, "walk_pushdown: the tables of rule %d are not a tuple", (int)rule);
            w->failed = 1;
            return NULL;
        }
        if (!PyArg_ParseTuple(item, "y*y*y*y*y*i", &r->table, &r->flags, &r->offsets, &r->data, &r->columns, &r->width)) {
            w->failed = 1;
            return NULL;
        }
        r->loaded = 1;
        int columns_fit = r->columns.len == 256 && r->width >= 1 && r->width <= 256;
        for (Py_ssize_t b = 0; columns_fit && b < 256; b++) columns_fit = ((const uint8_t *)r->columns.buf)[b] < r->width;
        if (!columns_fit) {
            PyErr_Format(PyExc_ValueError, "walk_pushdown: rule %d needs a [256] column map with every column below its width", (int)rule);
            w->failed = 1;
            return NULL;
        }
    }
    return r;
}

static void unload_rule(RuleBuffers *r) {
    if (!r || !r->loaded) return;
    PyBuffer_Release(&r->table);
    PyBuffer_Release(&r->flags);
    PyBuffer_Release(&r->offsets);
    PyBuffer_Release(&r->data);
    PyBuffer_Release(&r->columns);
    r->loaded = 0;
}

/* Compute a fact with `w->resolve(rule, state, byte)` (byte LIVENESS_REQUEST: a liveness). It answers
 * the rules' tables as they are now: where that is another tuple (an automaton grew, a rule was
 * added), every rule's buffers are taken again on next use. 0, or -1 with w->failed set. */
static int resolve_fact(Walk *w, int32_t rule, int32_t state, int32_t byte) {
    PyObject *tables = PyObject_CallFunction(w->resolve, "iii", (int)rule, (int)state, (int)byte);
    if (!tables) {
        w->failed = 1;
        return -1;
    }
    if (!PyTuple_Check(tables)) {
        Py_DECREF(tables);
        PyErr_SetString(PyExc_TypeError, "pushdown walk: resolve must answer the rules' tables as a tuple");
        w->failed = 1;
        return -1;
    }
    if (tables == w->rule_tuple) {
        Py_DECREF(tables);
        return 0;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(tables);
    if (count < w->num_rules) {  /* rules are only ever added: a shorter tuple would leave frames without tables */
        Py_DECREF(tables);
        PyErr_SetString(PyExc_ValueError, "pushdown walk: resolve answered fewer rules than the walk had");
        w->failed = 1;
        return -1;
    }
    if (count > w->num_rules) {
        RuleBuffers **grown = PyMem_Realloc(w->rules, count * sizeof(RuleBuffers *));
        if (!grown) {
            Py_DECREF(tables);
            PyErr_NoMemory();
            w->failed = 1;
            return -1;
        }
        memset(grown + w->num_rules, 0, (count - w->num_rules) * sizeof(RuleBuffers *));
        w->rules = grown;
        w->num_rules = count;
    }
    for (Py_ssize_t i = 0; i < w->num_rules; i++) unload_rule(w->rules[i]);
    if (w->owns_tuple) Py_DECREF(w->rule_tuple);
    w->rule_tuple = tables; /* the reference the call returned */
    w->owns_tuple = 1;
    return 0;
}

/* 1 live, 0 dead, -1 unknown (requested, or an error with w->failed set) */
static int live(Walk *w, int32_t rule, int32_t state) {
    RuleBuffers *r = rule_buffers(w, rule);
    if (!r) return -1;
    uint8_t flag = ((const uint8_t *)r->flags.buf)[state];
    if (!(flag & LIVE_KNOWN) && w->resolve != Py_None) {
        if (resolve_fact(w, rule, state, LIVENESS_REQUEST) < 0 || !(r = rule_buffers(w, rule))) return -1;
        flag = ((const uint8_t *)r->flags.buf)[state];
        if (!(flag & LIVE_KNOWN)) {
            PyErr_SetString(PyExc_RuntimeError, "pushdown walk: resolve left a liveness unknown");
            w->failed = 1;
            return -1;
        }
    }
    if (flag & LIVE_KNOWN) return (flag & LIVE) ? 1 : 0;
    request(w, rule, state, LIVENESS_REQUEST);
    return -1;
}

/* The successor of `state` in `rule` on `byte`: computed at once when w->resolve is set, else
 * UNKNOWN and requested. UNKNOWN with w->failed set on an error. */
static int32_t successor(Walk *w, int32_t rule, int32_t state, uint8_t byte) {
    RuleBuffers *r = rule_buffers(w, rule);
    if (!r) return UNKNOWN;
    int32_t next = ((const int32_t *)r->table.buf)[r->width * (int64_t)state + ((const uint8_t *)r->columns.buf)[byte]];
    if (next != UNKNOWN) return next;
    if (w->resolve == Py_None) {
        request(w, rule, state, byte);
        return UNKNOWN;
    }
    if (resolve_fact(w, rule, state, byte) < 0 || !(r = rule_buffers(w, rule))) return UNKNOWN;
    next = ((const int32_t *)r->table.buf)[r->width * (int64_t)state + ((const uint8_t *)r->columns.buf)[byte]];
    if (next == UNKNOWN) {
        PyErr_SetString(PyExc_RuntimeError, "pushdown walk: resolve left a transition unknown");
        w->failed = 1;
    }
    return next;
}

/* Buffers are taken again after every step that may have run `resolve` (a successor, a liveness,
 * a deeper run): it may have replaced them. */
static int run(Walk *w, int64_t p, int leave, int epsilon) {
    if (w->failed) return STATUS_DEAD;
    if (++w->steps > MAX_WALK_STEPS) return STATUS_LIMIT;
    if (p > w->reach) w->reach = p;
    int32_t rule = w->stack[2 * (w->depth - 1)], state = w->stack[2 * (w->depth - 1) + 1];
    if (p == w->end) {
        int l = live(w, rule, state);
        return l < 0 ? STATUS_PENDING : (l ? STATUS_END : STATUS_DEAD);
    }
    if (epsilon > MAX_EPSILON_MOVES) return STATUS_DEAD;
    int pending = 0, outcome;
    if (!leave) {
        int32_t next = successor(w, rule, state, w->bytes[p]);
        if (w->failed) return STATUS_DEAD;
        if (next == UNKNOWN) {
            pending = 1;
        } else if (next != DEAD) {
            w->stack[2 * (w->depth - 1) + 1] = next;
            outcome = run(w, p + 1, 0, 0);
            w->stack[2 * (w->depth - 1) + 1] = state;
            if (outcome == STATUS_END || outcome == STATUS_LIMIT) return outcome;
            pending |= outcome == STATUS_PENDING;
        }
    }
    RuleBuffers *r = rule_buffers(w, rule);
    if (!r) return STATUS_DEAD;
    int32_t offset = ((const int32_t *)r->offsets.buf)[state];
    if (offset >= 0 && w->depth >= MAX_DEPTH) w->cut = 1;
    if (offset >= 0 && w->depth < MAX_DEPTH) {
        int32_t count = ((const int32_t *)r->data.buf)[offset];
        for (int32_t k = 0; k < count; k++) {
            const int32_t *data = (const int32_t *)r->data.buf + offset;
            int32_t callee = data[1 + 2 * k], back = data[2 + 2 * k];
            int l = live(w, rule, back);
            if (w->failed) return STATUS_DEAD;
            if (l > 0 && callee >= 0 && callee < w->num_rules) {
                w->stack[2 * (w->depth - 1) + 1] = back;
                w->stack[2 * w->depth] = callee;
                w->stack[2 * w->depth + 1] = 1;
                w->depth++;
                if (w->depth > w->highest) w->highest = w->depth;
                outcome = run(w, p, 0, epsilon + 1);
                w->depth--;
                w->stack[2 * (w->depth - 1) + 1] = state;
                if (outcome == STATUS_END || outcome == STATUS_LIMIT) return outcome;
                pending |= outcome == STATUS_PENDING;
            } else {
                pending |= l < 0;
            }
            if (!(r = rule_buffers(w, rule))) return STATUS_DEAD;
        }
    }
    if ((((const uint8_t *)r->flags.buf)[state] & ACCEPTING) && w->depth > 1) {
        w->depth--;
        if (w->depth < w->lowest) w->lowest = w->depth;
        outcome = run(w, p, 0, epsilon + 1);
        w->depth++;
        w->stack[2 * (w->depth - 1)] = rule;
        w->stack[2 * (w->depth - 1) + 1] = state;
        if (outcome == STATUS_END || outcome == STATUS_LIMIT) return outcome;
        pending |= outcome == STATUS_PENDING;
    }
    return pending ? STATUS_PENDING : STATUS_DEAD;
}

static void release_rules(RuleBuffers **rules, Py_ssize_t count) {
    for (Py_ssize_t i = 0; i < count; i++) {
        RuleBuffers *r = rules[i];
        unload_rule(r);
        PyMem_Free(r);
    }
    PyMem_Free(rules);
}

/* A walk over one grammar's rules. Neither the stack nor the per-rule buffers are zeroed up front:
 * a call reads a few of a large grammar's rules, and its items use a few frames of the stack. */
static Walk *walk_new(PyObject *rule_tuple, PyObject *resolve, const uint8_t *bytes, Growable *requests) {
    Py_ssize_t num_rules = PyTuple_GET_SIZE(rule_tuple);
    Walk *w = PyMem_Malloc(sizeof(Walk));
    RuleBuffers **rules = PyMem_Calloc(num_rules ? num_rules : 1, sizeof(RuleBuffers *));
    if (!w || !rules) {
        PyMem_Free(w);
        PyMem_Free(rules);
        PyErr_NoMemory();
        return NULL;
    }
    w->rule_tuple = rule_tuple;
    w->owns_tuple = 0;
    w->resolve = resolve;
    w->rules = rules;
    w->num_rules = num_rules;
    w->bytes = bytes;
    w->end = 0;
    w->depth = 0;
    w->requests = requests;
    w->asked = NULL;
    w->asked_capacity = w->asked_used = 0;
    w->failed = 0;
    w->steps = 0;
    w->reach = 0;
    w->lowest = w->highest = 0;
    w->cut = 0;
    return w;
}

static void walk_free(Walk *w) {
    if (!w) return;
    release_rules(w->rules, w->num_rules);
    if (w->owns_tuple) Py_DECREF(w->rule_tuple);
    PyMem_Free(w->asked);
    PyMem_Free(w);
}

/* Walk item flat[begin:end] with the stack `frames` (`base` frames, bottom first) under
 * (top_rule, top_state). */
static int walk_item(Walk *w, const int32_t *frames, Py_ssize_t base, int32_t top_rule, int32_t top_state, int64_t begin,
                     int64_t end, int leave_first) {
    memcpy(w->stack, frames, (size_t)base * 2 * sizeof(int32_t));
    w->stack[2 * base] = top_rule;
    w->stack[2 * base + 1] = top_state;
    w->depth = w->lowest = w->highest = base + 1;
    w->end = end;
    w->steps = 0;
    w->reach = begin;
    return run(w, begin, leave_first, 0);
}

/* Items of one call that died inside their bytes, by first byte: the last one's top state and the
 * bytes its paths could not get past. Every path of an item is a function of the stack, its top
 * state and the bytes read so far; so when no path of a dead item read its byte k, another item with
 * the same top state and the same first k + 1 bytes is dead too, without a walk (exits in byte
 * order share long prefixes: 1,151 Llama-3.2 tokens leave a string body, most dead at their
 * second byte). */
typedef struct {
    int32_t state[256];
    int64_t begin[256], length[256];
} DeadPrefixes;

static void dead_prefixes_init(DeadPrefixes *d) {
    for (int b = 0; b < 256; b++) {
        d->state[b] = -1;
        d->begin[b] = d->length[b] = 0; /* never read unless a state matched; kept defined anyway */
    }
}

static int known_dead(const DeadPrefixes *d, const uint8_t *bytes, int32_t state, int64_t begin, int64_t end) {
    if (begin >= end) return 0;
    uint8_t first = bytes[begin];
    int64_t length = d->length[first];
    return d->state[first] == state && end - begin >= length && memcmp(bytes + begin, bytes + d->begin[first], (size_t)length) == 0;
}

/* Record an item walk_item just answered, if it died before its end. */
static void note_outcome(DeadPrefixes *d, const Walk *w, int outcome, const uint8_t *bytes, int32_t state, int64_t begin, int64_t end) {
    if (outcome != STATUS_DEAD || begin >= end || w->reach >= end) return;
    uint8_t first = bytes[begin];
    d->state[first] = state;
    d->begin[first] = begin;
    d->length[first] = w->reach - begin + 1;
}

static int check_walk_shape(Py_ssize_t base, int top_rule, Py_ssize_t num_rules) {
    if (base + 1 > MAX_DEPTH || top_rule < 0 || top_rule >= num_rules) {
        PyErr_SetString(PyExc_ValueError, "pushdown walk: stack too deep or bad top rule");
        return -1;
    }
    return 0;
}

static PyObject *walk_pushdown(PyObject *self, PyObject *args) {
    PyObject *rule_tuple;
    Py_buffer frames, top_states, flat, begins, ends, status;
    int top_rule, leave_first;
    PyObject *resolve = Py_None;
    if (!PyArg_ParseTuple(args, "O!y*iy*y*y*y*w*i|O", &PyTuple_Type, &rule_tuple, &frames, &top_rule, &top_states, &flat,
                          &begins, &ends, &status, &leave_first, &resolve))
        return NULL;
    Growable requests = {NULL, 0, 0, 3 * sizeof(int32_t)};
    PyObject *result = NULL;
    Walk *w = NULL;
    Py_ssize_t base = frames.len / 8;
    if (check_walk_shape(base, top_rule, PyTuple_GET_SIZE(rule_tuple)) < 0) goto done;
    w = walk_new(rule_tuple, resolve, flat.buf, &requests);
    if (!w) goto done;
    const int32_t *tops = top_states.buf;
    const int64_t *b = begins.buf, *e = ends.buf;
    uint8_t *st = status.buf;
    const uint8_t *bytes = flat.buf;
    Py_ssize_t m = top_states.len / 4;
    DeadPrefixes dead;
    dead_prefixes_init(&dead);
    for (Py_ssize_t i = 0; i < m; i++) {
        if (known_dead(&dead, bytes, tops[i], b[i], e[i])) {
            st[i] = STATUS_DEAD;
            continue;
        }
        st[i] = (uint8_t)walk_item(w, frames.buf, base, top_rule, tops[i], b[i], e[i], leave_first);
        if (w->failed) goto done;
        note_outcome(&dead, w, st[i], bytes, tops[i], b[i], e[i]);
    }
    result = grow_to_bytes(&requests);
done:
    if (requests.data) PyMem_Free(requests.data);
    walk_free(w);
    PyBuffer_Release(&frames); PyBuffer_Release(&top_states); PyBuffer_Release(&flat);
    PyBuffer_Release(&begins); PyBuffer_Release(&ends); PyBuffer_Release(&status);
    return result;
}

/* walk_pushdown over exits (leaving the top rule first), writing the token id of every item read
 * to `out` (int32, room for every item) in item order: the token of item i is
 * token_ids[positions[i]]. Returns (pending, limited, requests, read, below, above): how many items
 * wait for requested facts (their indices first in `pending`), whether some item ran past
 * MAX_WALK_STEPS, the requests, how many ids were written, how many frames under the top any path
 * returned into, and how many frames over it any path called (-1 where a call found no room). */
static PyObject *walk_exits(PyObject *self, PyObject *args) {
    PyObject *rule_tuple;
    Py_buffer frames, top_states, flat, begins, ends, positions, token_ids, read_ids, pending;
    int top_rule;
    PyObject *resolve = Py_None;
    if (!PyArg_ParseTuple(args, "O!y*iy*y*y*y*y*y*w*w*|O", &PyTuple_Type, &rule_tuple, &frames, &top_rule, &top_states, &flat,
                          &begins, &ends, &positions, &token_ids, &read_ids, &pending, &resolve))
        return NULL;
    Growable requests = {NULL, 0, 0, 3 * sizeof(int32_t)};
    PyObject *result = NULL;
    Walk *w = NULL;
    Py_ssize_t base = frames.len / 8, waiting = 0, read = 0, lowest = base + 1, highest = base + 1;
    int limited = 0;
    if (check_walk_shape(base, top_rule, PyTuple_GET_SIZE(rule_tuple)) < 0) goto done;
    const int32_t *tops = top_states.buf, *ids = token_ids.buf;
    const int64_t *b = begins.buf, *e = ends.buf, *pos = positions.buf;
    int32_t *out = read_ids.buf;
    int64_t *waits = pending.buf;
    const uint8_t *bytes = flat.buf;
    Py_ssize_t m = top_states.len / 4, num_ids = token_ids.len / 4;
    if (read_ids.len / 4 < m || pending.len / 8 < m) {
        PyErr_SetString(PyExc_ValueError, "walk_exits: the outputs have no room for every item");
        goto done;
    }
    w = walk_new(rule_tuple, resolve, flat.buf, &requests);
    if (!w) goto done;
    DeadPrefixes dead;
    dead_prefixes_init(&dead);
    for (Py_ssize_t i = 0; i < m; i++) {
        if (known_dead(&dead, bytes, tops[i], b[i], e[i])) continue;
        int outcome = walk_item(w, frames.buf, base, top_rule, tops[i], b[i], e[i], 1);
        if (w->failed) goto done;
        if (w->lowest < lowest) lowest = w->lowest;
        if (w->highest > highest) highest = w->highest;
        note_outcome(&dead, w, outcome, bytes, tops[i], b[i], e[i]);
        if (outcome == STATUS_END) {
            int64_t id = (pos[i] >= 0 && pos[i] < num_ids) ? ids[pos[i]] : -1;
            if (id < 0) {
                PyErr_Format(PyExc_ValueError, "walk_exits: item %zd names no token", i);
                goto done;
            }
            out[read++] = (int32_t)id;
        } else if (outcome == STATUS_PENDING) {
            waits[waiting++] = i;
        } else if (outcome == STATUS_LIMIT) {
            limited = 1;
        }
    }
    PyObject *raw = grow_to_bytes(&requests);
    if (raw) result = Py_BuildValue("(niNnnn)", waiting, limited, raw, read, base + 1 - lowest, w->cut ? (Py_ssize_t)-1 : highest - base - 1);
done:
    if (requests.data) PyMem_Free(requests.data);
    walk_free(w);
    PyBuffer_Release(&frames); PyBuffer_Release(&top_states); PyBuffer_Release(&flat); PyBuffer_Release(&begins);
    PyBuffer_Release(&ends); PyBuffer_Release(&positions); PyBuffer_Release(&token_ids); PyBuffer_Release(&read_ids);
    PyBuffer_Release(&pending);
    return result;
}

static PyMethodDef methods[] = {
    {"first_outside", first_outside, METH_VARARGS, "first byte outside a set, per token"},
    {"first_outside_text", first_outside_text, METH_VARARGS, "first byte outside ASCII set + whole UTF-8 chars"},
    {"set_bits", set_bits, METH_VARARGS, "OR token ids into a packed row"},
    {"clear_bits", clear_bits, METH_VARARGS, "clear the bits of token ids in a packed row"},
    {"fill_row", fill_row, METH_VARARGS, "write packed words or a few ids into a mask row"},
    {"fill_union", fill_union, METH_VARARGS, "write the union of held rows into a mask row"},
    {"union_ids", union_ids, METH_VARARGS, "the sorted distinct ids of a tuple of id rows"},
    {"count_bits", count_bits, METH_VARARGS, "bits set in a packed row"},
    {"unpack_bits", unpack_bits, METH_VARARGS, "ids of the bits set in a packed row"},
    {"fingerprint", fingerprint, METH_VARARGS, "64-bit fingerprint of a buffer"},
    {"same_bytes", same_bytes, METH_VARARGS, "whether two buffers hold the same bytes"},
    {"run_prefixes", run_prefixes, METH_VARARGS, "the tokens that are prefixes of each suffix of a literal"},
    {"prefix_range", prefix_range, METH_VARARGS, "sorted tokens that are prefixes of, or start with, a byte string"},
    {"walk_rule", walk_rule, METH_VARARGS, "walk token bytes through one automaton"},
    {"walk_pushdown", walk_pushdown, METH_VARARGS, "read token bytes with a pushdown automaton"},
    {"walk_exits", walk_exits, METH_VARARGS, "read exits with a pushdown automaton, writing the ids read"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_walk", "grammask fsm hot loops", -1, methods};

PyMODINIT_FUNC PyInit__walk(void) { return PyModule_Create(&module); }
