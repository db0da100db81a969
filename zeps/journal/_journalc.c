/* zeps.journal._journalc: the per-record loops of the columnar journal reader
 * (zeps/journal/columnar.py, walk.py, blockcrc.py) in C, one pass over a block.
 *
 * Optional (issue 20): setup.py builds it when a C compiler and the Python headers are there,
 * and zeps works without it. Each function has a numpy twin that stays the definition:
 *   walk          <- zeps.journal.walk.walk (the sequential walk; the index hints only speed the
 *                    numpy walk up and are proven to give the same positions)
 *   kinds         <- zeps.journal.columnar._kinds (batch record 1, headers record 2, else 0)
 *   check_plain   <- zeps.journal.columnar._Block's checks and fields
 *   first_bad_crc <- zeps.journal.blockcrc.first_bad_crc (record by record here)
 *   compact       <- zeps.journal.columnar._compact (offsets and one data buffer)
 *   plain_record  <- zeps.journal.record.encoder.plain_record_py (one plain record of an
 *                    append: encoder.encode_plain's bytes)
 *   fused_columns <- walk, kinds, check_plain, BatchRun (zeps.journal.batchcols) and compact
 *                    of a block's leading run of unflagged plain and batch records, fused
 *                    into one pass
 * tests/test_journalc.py checks both against each other for any block, valid or corrupt.
 * Nothing here trusts a position it is given: one that is not a whole record in the buffer is
 * a ValueError (a caller's bug), never a read out of bounds.
 *
 * record = length u32 BE (flags 0x80000000 producer, 0x40000000 headers) | crc u32 BE |
 *          timestamp u64 BE | [pid_len u8 | pid | pseq u64 BE] | frame (DELIVER)
 * CRC-32C covers timestamp .. end of record.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEADER_SIZE 16
#define CRC_OFFSET 4
#define TS_OFFSET 8
#define PID_LEN_OFFSET 16
#define EXT_FIXED 9
#define PRODUCER_FLAG 0x80000000u
#define HEADERS_FLAG 0x40000000u
#define LENGTH_MASK 0x3FFFFFFFu
#define SEQ_OFFSET 3
#define KEYLEN_OFFSET 11
#define KEY_OFFSET 12
#define MIN_FRAME 16
#define DELIVER_HEAD 0xAAA507u       /* signature aa a5, DELIVER id 7 */
#define BATCH_HEAD 0xAAA53Bu         /* signature aa a5, DELIVER-BATCH id 59 (read at init) */
/* a DELIVER-BATCH frame: aa a5 3b | timestamp u64 | seq u64 | count u32 | entries (each
 * keylen u8 | key | bodylen u32 | body; zeps/protocol/batch.py) */
#define BATCH_TS_AT 3
#define BATCH_SEQ_AT 11
#define BATCH_COUNT_AT 19
#define DELIVER_HEAD_SIZE 23
#define MIN_ENTRY 5

static uint32_t batch_head = BATCH_HEAD;

static inline uint32_t be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t be64(const unsigned char *p)
{
    return ((uint64_t)be32(p) << 32) | be32(p + 4);
}

static inline void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline void put_be64(unsigned char *p, uint64_t v)
{
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

/* ------------------------------------------------------------------------------ CRC-32C */

static uint32_t crc_table[8][256];

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static uint32_t crc_sw(const unsigned char *p, Py_ssize_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^
            crc_table[5][(lo >> 16) & 0xFF] ^ crc_table[4][lo >> 24] ^
            crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n-- > 0)
        c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xFF];
    return c ^ 0xFFFFFFFFu;
}

#if defined(__GNUC__) && defined(__x86_64__)
#include <nmmintrin.h>
#define HAVE_HW_CRC 1
__attribute__((target("sse4.2")))
static uint32_t crc_hw(const unsigned char *p, Py_ssize_t n)
{
    uint64_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n-- > 0)
        c32 = _mm_crc32_u8(c32, *p++);
    return c32 ^ 0xFFFFFFFFu;
}
#endif

static uint32_t (*crc32c)(const unsigned char *, Py_ssize_t) = crc_sw;

/* ------------------------------------------------------------------------------ helpers */

/* Bytes the record at p takes (zeps.journal.record.record_span), or 0 if its header (or
 * pid_len) is not within [p, end). */
static inline Py_ssize_t span_at(const unsigned char *b, Py_ssize_t p, Py_ssize_t end)
{
    if (end - p < HEADER_SIZE)
        return 0;
    uint32_t w = be32(b + p);
    if (w < PRODUCER_FLAG)
        return HEADER_SIZE + (Py_ssize_t)(w & LENGTH_MASK);
    if (end - p <= PID_LEN_OFFSET)
        return 0;
    return HEADER_SIZE + EXT_FIXED + b[p + PID_LEN_OFFSET] + (Py_ssize_t)(w & LENGTH_MASK);
}

/* an int64 array argument (any contiguous buffer of 8-byte items) */
static int get_i64(PyObject *o, Py_buffer *v, const char *what)
{
    if (PyObject_GetBuffer(o, v, PyBUF_ANY_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    size_t f = v->format == NULL ? 0 : strlen(v->format);
    if (v->itemsize != 8 || f == 0 || strchr("qlQL", v->format[f - 1]) == NULL) {
        PyBuffer_Release(v);
        PyErr_Format(PyExc_TypeError, "%s: an int64 array is needed", what);
        return -1;
    }
    if ((uintptr_t)v->buf % sizeof(int64_t) != 0) {    /* read as int64_t: aligned, or UB */
        PyBuffer_Release(v);
        PyErr_Format(PyExc_ValueError, "%s: an int64 array aligned to 8 bytes is needed", what);
        return -1;
    }
    return 0;
}

static PyObject *new_bytes(Py_ssize_t n, char **out)
{
    PyObject *o = PyBytes_FromStringAndSize(NULL, n);
    if (o != NULL)
        *out = PyBytes_AS_STRING(o);
    return o;
}

/* ------------------------------------------------------------------------------ walk */

/* walk(buf, limit) -> (positions: bytes of native int64, after) */
static PyObject *
jc_walk(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "y*n", &view, &limit))
        return NULL;
    const unsigned char *b = (const unsigned char *)view.buf;
    if (limit > view.len)
        limit = view.len;
    if (limit < 0)
        limit = 0;
    /* one pass into a growing array (a first guess from the first record's size) */
    Py_ssize_t s0 = span_at(b, 0, limit);
    Py_ssize_t cap = (s0 ? limit / s0 : 0) + 64, count = 0, p = 0, s;
    int64_t *o = PyMem_RawMalloc(cap * sizeof(int64_t)), *grown;
    PyObject *res = NULL;
    if (o == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    while ((s = span_at(b, p, limit)) && p + s <= limit) {
        if (count == cap) {
            cap *= 2;
            grown = PyMem_RawRealloc(o, cap * sizeof(int64_t));
            if (grown == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            o = grown;
        }
        o[count++] = p;
        p += s;
    }
    PyObject *pos = PyBytes_FromStringAndSize((const char *)o, count * 8);
    if (pos != NULL)
        res = Py_BuildValue("(Nn)", pos, p);
done:
    PyMem_RawFree(o);
    PyBuffer_Release(&view);
    return res;
}

/* ------------------------------------------------------------------------------ kinds */

/* kinds(buf, positions) -> bytes: 2 for a record with the headers flag, 1 for one holding a
 * DELIVER-BATCH frame (after its producer extension), else 0 (reads clamped to the buffer, as
 * the numpy version's) */
static PyObject *
jc_kinds(PyObject *self, PyObject *args)
{
    Py_buffer view, pv;
    PyObject *po;
    if (!PyArg_ParseTuple(args, "y*O", &view, &po))
        return NULL;
    if (get_i64(po, &pv, "positions") < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const unsigned char *b = (const unsigned char *)view.buf;
    Py_ssize_t len = view.len, n = pv.len / 8;
    const int64_t *pos = (const int64_t *)pv.buf;
    char *out;
    PyObject *res = NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        if (pos[i] < 0 || pos[i] > len - HEADER_SIZE) {    /* (no sum: it could wrap) */
            PyErr_SetString(PyExc_ValueError, "a position is not a record's in the buffer");
            goto done;
        }
    res = new_bytes(n, &out);
    if (res == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t p = pos[i];
        uint32_t w = be32(b + p);
        if (w & HEADERS_FLAG) {
            out[i] = 2;
            continue;
        }
        Py_ssize_t at = p + HEADER_SIZE;
        if (w >= PRODUCER_FLAG) {
            Py_ssize_t l = p + PID_LEN_OFFSET < len - 1 ? p + PID_LEN_OFFSET : len - 1;
            at += EXT_FIXED + b[l];
        }
        if (at > len - 4)
            at = len - 4;
        out[i] = (be32(b + at) >> 8) == batch_head;
    }
done:
    PyBuffer_Release(&pv);
    PyBuffer_Release(&view);
    return res;
}

/* ------------------------------------------------------------------------------ checks */

/* The bound a run's first timestamp must not go under: the last timestamp read before it
 * (Python int or None: no bound). */
struct ts_bound {
    int have, over;             /* over > 0: above any int64, so every timestamp is under it */
    long long ts;
};

static int get_ts_bound(PyObject *o, struct ts_bound *lb)
{
    lb->have = o != Py_None;
    lb->over = 0;
    lb->ts = 0;
    if (lb->have) {
        lb->ts = PyLong_AsLongLongAndOverflow(o, &lb->over);
        if (lb->ts == -1 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

/* Whether timestamp t does not go back: not under the previous record's (prev_t), or for a
 * run's first record (first != 0), not under lb. */
static inline int ts_ok(const struct ts_bound *lb, int first, int64_t prev_t, int64_t t)
{
    return first ? !(lb->have && (lb->over > 0 || (lb->over == 0 && t < lb->ts))) : t >= prev_t;
}

/* The checks parse_records makes of a DELIVER record at p whose frame is b[frame:bend] (bend:
 * the record's end): the DELIVER signature, key and body lengths adding up to the frame, the
 * sequence expect_s, a timestamp not under the previous record's (prev_t; for a run's first
 * record, first != 0, not under lb), and the CRC-32C if verify. 1 if it passes, with its key
 * range, sequence and timestamp; 0 if not (the outputs are then undefined). */
static inline int deliver_ok(const unsigned char *b, Py_ssize_t p, Py_ssize_t frame,
                             Py_ssize_t bend, int64_t expect_s, const struct ts_bound *lb,
                             int first, int64_t prev_t, int verify, Py_ssize_t *kstart,
                             Py_ssize_t *kend, int64_t *s, int64_t *t)
{
    if ((be32(b + frame) >> 8) != DELIVER_HEAD)
        return 0;
    *kstart = frame + KEY_OFFSET;
    *kend = *kstart + b[frame + KEYLEN_OFFSET];
    if (*kend + 4 > bend || *kend + 4 + (Py_ssize_t)be32(b + *kend) != bend)
        return 0;
    *s = (int64_t)be64(b + frame + SEQ_OFFSET);
    if (*s != expect_s)
        return 0;
    *t = (int64_t)be64(b + p + TS_OFFSET);
    if (!ts_ok(lb, first, prev_t, *t))
        return 0;
    return !verify ||
        crc32c(b + p + TS_OFFSET, bend - p - TS_OFFSET) == be32(b + p + CRC_OFFSET);
}

/* check_plain(buf, positions, expect_seq, last_ts or None, verify_crc)
 *   -> (n, seq, ts, kstart, kend, bend, pstart, pend, pseq, flagged)
 * n: how many leading records pass every check of columnar._Block (before its producer-id UTF-8
 * check); the arrays (bytes of native int64 / uint64, n items; flagged: n bytes 0/1) are its
 * fields. positions must be whole records of buf (ValueError otherwise). */
static PyObject *
jc_check_plain(PyObject *self, PyObject *args)
{
    Py_buffer view, pv;
    PyObject *po, *last_ts_o;
    long long expect;
    int verify;
    if (!PyArg_ParseTuple(args, "y*OLOp", &view, &po, &expect, &last_ts_o, &verify))
        return NULL;
    if (get_i64(po, &pv, "positions") < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    struct ts_bound lb;
    PyObject *res = NULL;
    PyObject *arr[9] = {NULL};
    if (get_ts_bound(last_ts_o, &lb) < 0)
        goto done;
    const unsigned char *b = (const unsigned char *)view.buf;
    Py_ssize_t len = view.len, m = pv.len / 8;
    const int64_t *pos = (const int64_t *)pv.buf;
    for (Py_ssize_t i = 0; i < m; i++) {
        Py_ssize_t s = pos[i] >= 0 ? span_at(b, pos[i], len) : 0;
        if (s == 0 || pos[i] + s > len) {
            PyErr_SetString(PyExc_ValueError, "a position is not a whole record in the buffer");
            goto done;
        }
    }
    char *out[9];
    for (int k = 0; k < 9; k++) {
        arr[k] = new_bytes(k == 8 ? m : m * 8, &out[k]);
        if (arr[k] == NULL)
            goto done;
    }
    int64_t *seq = (int64_t *)out[0], *ts = (int64_t *)out[1], *ks = (int64_t *)out[2],
            *ke = (int64_t *)out[3], *be = (int64_t *)out[4], *ps = (int64_t *)out[5],
            *pe = (int64_t *)out[6];
    uint64_t *pq = (uint64_t *)out[7];
    char *fl = out[8];
    Py_ssize_t n = 0;
    int any_flagged = 0;
    Py_BEGIN_ALLOW_THREADS
    for (; n < m; n++) {
        Py_ssize_t p = pos[n];
        uint32_t w = be32(b + p);
        Py_ssize_t length = w & LENGTH_MASK, ext = 0, pst = 0, pen = 0;
        uint64_t pseq = 0;
        if (length < MIN_FRAME)
            break;
        int flagged = w > LENGTH_MASK;
        if (flagged) {
            /* (in the reader a record with the headers flag never gets here: kinds puts it
             * apart; given one, its "pid_len" byte is read as numpy does, and the check that
             * the frame ends with the record below stops the run) */
            Py_ssize_t plen = b[p + PID_LEN_OFFSET];
            if (plen == 0)
                break;
            ext = EXT_FIXED + plen;
            pst = p + PID_LEN_OFFSET + 1;
            pen = pst + plen;
            if (pen + 8 > len)
                break;          /* cannot be: the record is whole and its frame >= MIN_FRAME */
            pseq = be64(b + pen);
            if (pseq == 0)
                break;
        }
        Py_ssize_t frame = p + HEADER_SIZE + ext;
        Py_ssize_t bend = frame + length;
        /* (bend is the record's end but for a record with the headers flag, which kinds puts
         * apart: one is never read past) */
        Py_ssize_t kstart, kend;
        int64_t s, t;
        if (bend > p + span_at(b, p, len) ||
            !deliver_ok(b, p, frame, bend, (int64_t)((uint64_t)expect + (uint64_t)n), &lb,
                        n == 0, n ? ts[n - 1] : 0, verify, &kstart, &kend, &s, &t))
            break;
        seq[n] = s;
        ts[n] = t;
        ks[n] = kstart;
        ke[n] = kend;
        be[n] = bend;
        ps[n] = pst;
        pe[n] = pen;
        pq[n] = pseq;
        fl[n] = (char)flagged;
        any_flagged |= flagged;
    }
    Py_END_ALLOW_THREADS
    for (int k = 0; k < 9; k++)
        if (_PyBytes_Resize(&arr[k], k == 8 ? n : n * 8) < 0)
            goto done;
    res = Py_BuildValue("(nNNNNNNNNNO)", n, arr[0], arr[1], arr[2], arr[3], arr[4], arr[5],
                        arr[6], arr[7], arr[8], any_flagged ? Py_True : Py_False);
    /* "N" takes the reference also when the tuple cannot be made (they were released twice) */
    for (int k = 0; k < 9; k++)
        arr[k] = NULL;
done:
    for (int k = 0; k < 9; k++)
        Py_XDECREF(arr[k]);
    PyBuffer_Release(&pv);
    PyBuffer_Release(&view);
    return res;
}

/* first_bad_crc(buf, positions, after) -> index of the first record whose CRC-32C (over
 * timestamp .. the next position, the last one's up to after) is not its stored one, or
 * len(positions) */
static PyObject *
jc_first_bad_crc(PyObject *self, PyObject *args)
{
    Py_buffer view, pv;
    PyObject *po;
    Py_ssize_t after;
    if (!PyArg_ParseTuple(args, "y*On", &view, &po, &after))
        return NULL;
    if (get_i64(po, &pv, "positions") < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const unsigned char *b = (const unsigned char *)view.buf;
    Py_ssize_t len = view.len, n = pv.len / 8, i;
    const int64_t *pos = (const int64_t *)pv.buf;
    PyObject *res = NULL;
    for (i = 0; i < n; i++) {
        Py_ssize_t e = i + 1 < n ? pos[i + 1] : after;
        /* (no sum: it could wrap; nor a difference before e is known to be >= HEADER_SIZE:
         * an `after` or a position near -2**63 wrapped e - HEADER_SIZE, passed, and the CRC
         * read ~2**63 bytes) */
        if (pos[i] < 0 || e > len || e < HEADER_SIZE || pos[i] > e - HEADER_SIZE) {
            PyErr_SetString(PyExc_ValueError, "positions are not records of the buffer");
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    for (i = 0; i < n; i++) {
        Py_ssize_t p = pos[i], e = i + 1 < n ? pos[i + 1] : after;
        if (crc32c(b + p + TS_OFFSET, e - p - TS_OFFSET) != be32(b + p + CRC_OFFSET))
            break;
    }
    Py_END_ALLOW_THREADS
    res = PyLong_FromSsize_t(i);
done:
    PyBuffer_Release(&pv);
    PyBuffer_Release(&view);
    return res;
}

/* ------------------------------------------------------------------------------ compact */

/* compact(buf, starts, ends) -> (offsets: bytes of n + 1 native int32, data: bytes), the
 * ranges buf[starts[i]:ends[i]] one after the other */
static PyObject *
jc_compact(PyObject *self, PyObject *args)
{
    Py_buffer view, sv, ev;
    PyObject *so, *eo;
    if (!PyArg_ParseTuple(args, "y*OO", &view, &so, &eo))
        return NULL;
    if (get_i64(so, &sv, "starts") < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (get_i64(eo, &ev, "ends") < 0) {
        PyBuffer_Release(&sv);
        PyBuffer_Release(&view);
        return NULL;
    }
    PyObject *res = NULL, *offs = NULL, *data = NULL;
    Py_ssize_t n = sv.len / 8, len = view.len, total = 0;
    const int64_t *s = (const int64_t *)sv.buf, *e = (const int64_t *)ev.buf;
    if (ev.len != sv.len) {
        PyErr_SetString(PyExc_ValueError, "starts and ends differ in length");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < 0 || e[i] < s[i] || e[i] > len) {
            PyErr_SetString(PyExc_ValueError, "a range is not within the buffer");
            goto done;
        }
        total += e[i] - s[i];
        if (total > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "over 2 GiB of data");
            goto done;
        }
    }
    char *o, *d;
    offs = new_bytes((n + 1) * 4, &o);
    data = offs ? new_bytes(total, &d) : NULL;
    if (data == NULL)
        goto done;
    const unsigned char *b = (const unsigned char *)view.buf;
    Py_BEGIN_ALLOW_THREADS
    int32_t *off = (int32_t *)o;
    int32_t at = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        off[i] = at;
        int32_t k = (int32_t)(e[i] - s[i]);
        memcpy(d + at, b + s[i], k);
        at += k;
    }
    off[n] = at;
    Py_END_ALLOW_THREADS
    res = Py_BuildValue("(OO)", offs, data);
done:
    Py_XDECREF(offs);
    Py_XDECREF(data);
    PyBuffer_Release(&ev);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&view);
    return res;
}

/* ------------------------------------------------------------------------------ plain run */

/* How far ahead of the record it checks the plain-run loop asks the CPU to load the block: the
 * hardware prefetcher stops at page boundaries, and a block read through a map of the page cache
 * (BlockBuffer.mapped) is not in any cache (bench_spark, reader alone: 25 -> 34M rows/s).
 * Three lines per record: records of 100-byte bodies are about 150 bytes. */
#define PREFETCH_AHEAD 4096
#if defined(__GNUC__)
#define PREFETCH(a) __builtin_prefetch(a)
#else
#define PREFETCH(a) ((void)0)
#endif

/* Whether s[:n] is valid UTF-8 as Python's decode and Arrow's validation define it: no
 * overlong form, no surrogate, nothing above U+10FFFF, no truncated sequence. */
static inline int utf8_ok(const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        unsigned char lo = 0x80, hi = 0xBF;         /* the range of the second byte */
        int more;
        if (c >= 0xC2 && c <= 0xDF)
            more = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            more = 2;
            if (c == 0xE0)
                lo = 0xA0;                          /* not overlong */
            else if (c == 0xED)
                hi = 0x9F;                          /* not a surrogate */
        } else if (c >= 0xF0 && c <= 0xF4) {
            more = 3;
            if (c == 0xF0)
                lo = 0x90;                          /* not overlong */
            else if (c == 0xF4)
                hi = 0x8F;                          /* not above U+10FFFF */
        } else
            return 0;
        if (n - i <= more || s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (int k = 2; k <= more; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
        i += more + 1;
    }
    return 1;
}

/* The checks parse_records makes of an unflagged batch record at p whose DELIVER-BATCH frame is
 * b[frame:bend] (bend: the record's end; the frame's head already seen), as BatchRun makes them:
 * room for the head and one entry, the frame's timestamp equal to the record's, 1 <= count <=
 * what the frame can hold, the sequence expect_s, a timestamp not under the previous record's
 * (as deliver_ok), the CRC-32C if verify, and count entries filling the frame exactly - and
 * every key valid UTF-8 (the numpy path refuses a batch record with one bad key, even where
 * the read takes none of its messages), and sequences that stay within int64. 1 if it passes,
 * with its count and timestamp; 0 if not. */
static inline int batch_ok(const unsigned char *b, Py_ssize_t p, Py_ssize_t frame,
                           Py_ssize_t bend, int64_t expect_s, const struct ts_bound *lb,
                           int first, int64_t prev_t, int verify, Py_ssize_t *count,
                           int64_t *t)
{
    Py_ssize_t length = bend - frame;
    if (length < DELIVER_HEAD_SIZE + MIN_ENTRY)
        return 0;
    *count = be32(b + frame + BATCH_COUNT_AT);
    if (*count < 1 || *count > (length - DELIVER_HEAD_SIZE) / MIN_ENTRY)
        return 0;
    /* its sequences and the next record's within int64 (else the general path reads it) */
    if ((uint64_t)expect_s > (uint64_t)INT64_MAX - (uint64_t)*count)
        return 0;
    *t = (int64_t)be64(b + p + TS_OFFSET);
    if ((int64_t)be64(b + frame + BATCH_TS_AT) != *t)
        return 0;
    if ((int64_t)be64(b + frame + BATCH_SEQ_AT) != expect_s)
        return 0;
    if (!ts_ok(lb, first, prev_t, *t))
        return 0;
    if (verify && crc32c(b + p + TS_OFFSET, bend - p - TS_OFFSET) != be32(b + p + CRC_OFFSET))
        return 0;
    Py_ssize_t q = frame + DELIVER_HEAD_SIZE;
    for (Py_ssize_t i = 0; i < *count; i++) {         /* keylen u8 | key | bodylen u32 | body */
        if (q + MIN_ENTRY > bend)
            return 0;
        Py_ssize_t kend = q + 1 + b[q];
        if (kend + 4 > bend)
            return 0;
        uint32_t bl = be32(b + kend);
        if ((size_t)bl > (size_t)(bend - kend - 4))
            return 0;
        if (!utf8_ok(b + q + 1, b[q]))    /* every key, as BatchRun's caller checks them */
            return 0;
        q = kend + 4 + (Py_ssize_t)bl;
    }
    return q == bend;
}

/* fused_columns' outputs (the caller's buffers) and how much of them is written */
struct rows {
    int64_t *seqs, *tss;
    int32_t *koff, *boff;
    char *kd, *bd;
    Py_ssize_t n;
    int32_t kat, bat;
};

/* one row: its sequence, timestamp, key and body appended */
static inline void put_row(struct rows *o, int64_t s, int64_t t, const unsigned char *key,
                           int32_t kl, const unsigned char *body, int32_t bl)
{
    o->seqs[o->n] = s;
    o->tss[o->n] = t;
    o->koff[o->n] = o->kat;
    o->boff[o->n] = o->bat;
    memcpy(o->kd + o->kat, key, kl);
    memcpy(o->bd + o->bat, body, bl);
    o->kat += kl;
    o->bat += bl;
    o->n++;
}

/* fused_columns(buf, limit, expect_seq, last_ts or None, verify_crc, want_seq, last_seq or -1,
 *               seq, ts, key_offsets, keys, body_offsets, bodies)
 *   -> (n, after, next_seq, last_t, rows, key_bytes, body_bytes, stopped)
 * One pass over the leading run of unflagged records of buf[:limit] that hold a DELIVER frame
 * (plain records: what kinds calls 0 and check_plain accepts unflagged) or a DELIVER-BATCH
 * frame (batch records: kinds 1, what BatchRun accepts unflagged): walks, checks and copies at
 * once, as walk + kinds + check_plain / BatchRun + compact would, and stops before the first
 * record that is not whole, is flagged, holds neither frame, fails a check, would not fit in the
 * outputs, or holds a message after last_seq. n: the records passed; after: the byte after
 * them; next_seq: the sequence after them; last_t: the last one's timestamp (0 if n is 0).
 * The rows are the messages of the n records from want_seq on - and, when a batch record holds
 * last_seq and messages after it, that record's messages up to last_seq, the record itself not
 * passed (a read that stops inside a batch stops at its record, as parse_records does);
 * stopped: 1 when the run ended at last_seq (a record after it, or one holding it and more).
 * They are written into the six writable buffers given (the caller's memory: a pool that reuses
 * it, so that a block's columns do not fault in fresh pages): seq and ts (native int64, `rows`
 * items), key_offsets and body_offsets (rows + 1 native int32 each) over keys and bodies
 * (key_bytes and body_bytes). Each buffer must hold what limit bytes of plain records can give
 * (plain_capacity(limit)); a record whose messages would pass that many rows is not taken
 * (batch entries smaller than 32 bytes can). A plain record's key is not UTF-8 checked (the
 * caller checks the rows'); a batch record's keys all are, taken or not (the numpy path
 * refuses the whole record for one bad key). A record whose sequences would pass int64 is left
 * to the general path. */
static PyObject *
jc_fused_columns(PyObject *self, PyObject *args)
{
    Py_buffer view, ob[6];
    Py_ssize_t limit;
    PyObject *last_ts_o;
    long long expect, want, last_seq;
    int verify, got = 0;
    PyObject *res = NULL;
    if (!PyArg_ParseTuple(args, "y*nLOpLLw*w*w*w*w*w*", &view, &limit, &expect, &last_ts_o,
                          &verify, &want, &last_seq, &ob[0], &ob[1], &ob[2], &ob[3], &ob[4],
                          &ob[5]))
        return NULL;
    got = 6;
    struct ts_bound lb;
    if (get_ts_bound(last_ts_o, &lb) < 0)
        goto done;
    if (limit > view.len)
        limit = view.len;
    if (limit < 0)
        limit = 0;
    if (limit > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "over 2 GiB of data");
        goto done;
    }
    /* capacities: a plain record takes at least HEADER_SIZE + MIN_FRAME bytes; keys and bodies
     * are within the buffer */
    Py_ssize_t cap = limit / (HEADER_SIZE + MIN_FRAME) + 1;
    Py_ssize_t sizes[6] = {cap * 8, cap * 8, (cap + 1) * 4, limit, (cap + 1) * 4, limit};
    for (int k = 0; k < 6; k++)
        if (ob[k].len < sizes[k]) {
            PyErr_Format(PyExc_ValueError, "output buffer %d holds %zd bytes, %zd needed", k,
                         ob[k].len, sizes[k]);
            goto done;
        }
    /* written as int64_t (seq, ts) and int32_t (the offsets): aligned, or UB */
    static const size_t align[6] = {sizeof(int64_t), sizeof(int64_t), sizeof(int32_t), 1,
                                    sizeof(int32_t), 1};
    for (int k = 0; k < 6; k++)
        if ((uintptr_t)ob[k].buf % align[k] != 0) {
            PyErr_Format(PyExc_ValueError, "output buffer %d is not aligned to %zu bytes", k,
                         align[k]);
            goto done;
        }
    struct rows out = {(int64_t *)ob[0].buf, (int64_t *)ob[1].buf, (int32_t *)ob[2].buf,
                       (int32_t *)ob[4].buf, ob[3].buf, ob[5].buf, 0, 0, 0};
    const unsigned char *b = (const unsigned char *)view.buf;
    Py_ssize_t n = 0, p = 0;
    uint64_t next = (uint64_t)expect;
    int64_t prev_t = 0;
    int stopped = 0;
    Py_BEGIN_ALLOW_THREADS
    while (limit - p >= HEADER_SIZE && next < (uint64_t)INT64_MAX) {
        uint32_t w = be32(b + p);                   /* (sequences past int64: general path) */
        if (w > LENGTH_MASK)
            break;                                  /* flagged: not this run's */
        Py_ssize_t length = w, frame = p + HEADER_SIZE, bend = frame + length;
        if (bend > limit)
            break;                                  /* not whole */
        if (length < MIN_FRAME)
            break;
        if (p + PREFETCH_AHEAD + 192 <= limit) {    /* the records a page ahead (a map of the
                                                      * page cache: one miss per page else) */
            PREFETCH(b + p + PREFETCH_AHEAD);
            PREFETCH(b + p + PREFETCH_AHEAD + 64);
            PREFETCH(b + p + PREFETCH_AHEAD + 128);
            /* a longer record (a batch record, whose entries are walked one after the
             * other): the rest of it as far ahead, unless the CRC pass streams through it
             * first (then the prefetch costs more than it saves). Reader alone on batch
             * records of 100, builds with and without this alternated: 23 -> 34M rows/s
             * without the CRC, 28M with it either way (27M with this prefetch there too). */
            for (Py_ssize_t o = 192; !verify && o < length + HEADER_SIZE &&
                     p + PREFETCH_AHEAD + o + 64 <= limit; o += 64)
                PREFETCH(b + p + PREFETCH_AHEAD + o);
        }
        int64_t t;
        if ((be32(b + frame) >> 8) == batch_head) {
            Py_ssize_t count;
            if (!batch_ok(b, p, frame, bend, (int64_t)next, &lb, n == 0, prev_t, verify,
                          &count, &t))
                break;
            int64_t s = (int64_t)next;
            if (last_seq >= 0 && s > last_seq) {
                stopped = 1;
                break;
            }
            if (out.n + count > cap)
                break;                              /* would not fit: the next call takes it */
            Py_ssize_t lo = want > s ? (Py_ssize_t)(want - s) : 0;
            Py_ssize_t hi = count;
            if (last_seq >= 0 && last_seq - s + 1 < count) {
                hi = (Py_ssize_t)(last_seq - s + 1);
                stopped = 1;
            }
            Py_ssize_t q = frame + DELIVER_HEAD_SIZE;
            for (Py_ssize_t i = 0; i < hi; i++) {
                Py_ssize_t kend = q + 1 + b[q];
                Py_ssize_t bl = (Py_ssize_t)be32(b + kend);
                if (i >= lo)
                    put_row(&out, s + i, t, b + q + 1, (int32_t)(kend - q - 1), b + kend + 4,
                            (int32_t)bl);
                q = kend + 4 + bl;
            }
            if (stopped)
                break;                              /* its record is not passed */
            next += (uint64_t)count;
        } else {
            Py_ssize_t kstart, kend;
            int64_t s;
            if (!deliver_ok(b, p, frame, bend, (int64_t)next, &lb, n == 0, prev_t, verify,
                            &kstart, &kend, &s, &t))
                break;
            if (last_seq >= 0 && s > last_seq) {
                stopped = 1;
                break;
            }
            if (out.n + 1 > cap)
                break;                              /* after batches of tiny messages */
            if (s >= want)
                put_row(&out, s, t, b + kstart, (int32_t)(kend - kstart), b + kend + 4,
                        (int32_t)(bend - kend - 4));
            next++;
        }
        prev_t = t;
        n++;
        p = bend;
    }
    out.koff[out.n] = out.kat;
    out.boff[out.n] = out.bat;
    Py_END_ALLOW_THREADS
    res = Py_BuildValue("(nnKLniii)", n, p, (unsigned long long)next, (long long)prev_t, out.n,
                        (int)out.kat, (int)out.bat, stopped);
done:
    for (int k = 0; k < got; k++)
        PyBuffer_Release(&ob[k]);
    PyBuffer_Release(&view);
    return res;
}

/* f(data) for a function of one bytes-like argument */
static PyObject *
on_buffer(PyObject *args, PyObject *(*f)(const unsigned char *, Py_ssize_t))
{
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    PyObject *res = f((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return res;
}

static PyObject *crc_of(const unsigned char *p, Py_ssize_t n)
{
    return PyLong_FromUnsignedLong(crc32c(p, n));
}

static PyObject *crc_table_of(const unsigned char *p, Py_ssize_t n)
{
    return PyLong_FromUnsignedLong(crc_sw(p, n));
}

static PyObject *utf8_of(const unsigned char *p, Py_ssize_t n)
{
    return PyBool_FromLong(utf8_ok(p, n));
}

static PyObject *
jc_crc32c(PyObject *self, PyObject *args)
{
    return on_buffer(args, crc_of);
}

/* the table-driven CRC whatever the CPU (so that tests check it where SSE4.2 is used) */
static PyObject *
jc_crc32c_table(PyObject *self, PyObject *args)
{
    return on_buffer(args, crc_table_of);
}

/* utf8_ok, for the tests (against Python's decode) */
static PyObject *
jc_valid_utf8(PyObject *self, PyObject *args)
{
    return on_buffer(args, utf8_of);
}

/* ------------------------------------------------------------------------------ append */

/* plain_record(seq, timestamp, key, body) -> (record, frame): one plain record (its 16-byte
 * header, then its DELIVER frame) and that DELIVER frame, as
 * zeps.journal.record.encoder.plain_record_py builds them in Python (the definition; the
 * journal's plain PUBLISHes of a round, encoder.encode_plain, issue 20). key and
 * body are bytes; seq and timestamp fit in 64 bits; the key is at most 255 bytes. The caller
 * checks the record's size. */
static PyObject *
jc_plain_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "plain_record(seq, timestamp, key, body)");
        return NULL;
    }
    if (!PyBytes_CheckExact(args[2]) || !PyBytes_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "plain_record: key and body must be bytes");
        return NULL;
    }
    unsigned long long seq = PyLong_AsUnsignedLongLong(args[0]);
    if (seq == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    unsigned long long ts = PyLong_AsUnsignedLongLong(args[1]);
    if (ts == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t klen = PyBytes_GET_SIZE(args[2]), blen = PyBytes_GET_SIZE(args[3]);
    if (klen > 255 || blen > (Py_ssize_t)LENGTH_MASK - MIN_FRAME - klen) {
        PyErr_SetString(PyExc_ValueError, "plain_record: key over 255 bytes or record too large");
        return NULL;
    }
    Py_ssize_t flen = MIN_FRAME + klen + blen;
    char *out;
    PyObject *rec = new_bytes(HEADER_SIZE + flen, &out);
    if (rec == NULL)
        return NULL;
    unsigned char *r = (unsigned char *)out, *f = r + HEADER_SIZE;
    f[0] = (unsigned char)(DELIVER_HEAD >> 16);        /* signature, then DELIVER's id */
    f[1] = (unsigned char)(DELIVER_HEAD >> 8);
    f[2] = (unsigned char)DELIVER_HEAD;
    put_be64(f + SEQ_OFFSET, seq);
    f[KEYLEN_OFFSET] = (unsigned char)klen;
    memcpy(f + KEY_OFFSET, PyBytes_AS_STRING(args[2]), klen);
    put_be32(f + KEY_OFFSET + klen, (uint32_t)blen);
    memcpy(f + KEY_OFFSET + klen + 4, PyBytes_AS_STRING(args[3]), blen);
    put_be32(r, (uint32_t)flen);
    put_be64(r + TS_OFFSET, ts);
    put_be32(r + CRC_OFFSET, crc32c(r + TS_OFFSET, HEADER_SIZE - TS_OFFSET + flen));
    PyObject *frame = PyBytes_FromStringAndSize((const char *)f, flen);
    if (frame == NULL) {
        Py_DECREF(rec);
        return NULL;
    }
    PyObject *pair = PyTuple_New(2);
    if (pair == NULL) {
        Py_DECREF(rec);
        Py_DECREF(frame);
        return NULL;
    }
    PyTuple_SET_ITEM(pair, 0, rec);
    PyTuple_SET_ITEM(pair, 1, frame);
    return pair;
}

static PyMethodDef jc_methods[] = {
    {"plain_record", (PyCFunction)(void (*)(void))jc_plain_record, METH_FASTCALL,
     "plain_record(seq, timestamp, key, body) -> (record, frame)"},
    {"walk", jc_walk, METH_VARARGS, "walk(buf, limit) -> (positions int64 bytes, after)"},
    {"kinds", jc_kinds, METH_VARARGS, "kinds(buf, positions) -> int8 bytes"},
    {"check_plain", jc_check_plain, METH_VARARGS,
     "check_plain(buf, positions, expect_seq, last_ts, verify_crc) -> (n, fields...)"},
    {"first_bad_crc", jc_first_bad_crc, METH_VARARGS,
     "first_bad_crc(buf, positions, after) -> index"},
    {"compact", jc_compact, METH_VARARGS, "compact(buf, starts, ends) -> (offsets, data)"},
    {"fused_columns", jc_fused_columns, METH_VARARGS,
     "fused_columns(buf, limit, expect_seq, last_ts, verify_crc, want_seq, last_seq, seq, ts, "
     "key_offsets, keys, body_offsets, bodies) -> (n, after, next_seq, last_t, rows, key_bytes, "
     "body_bytes, stopped)"},
    {"crc32c", jc_crc32c, METH_VARARGS, "crc32c(data) -> CRC-32C"},
    {"valid_utf8", jc_valid_utf8, METH_VARARGS, "valid_utf8(data) -> bool (a batch key's check)"},
    {"crc32c_table", jc_crc32c_table, METH_VARARGS, "crc32c(data), table-driven"},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef jc_module = {
    PyModuleDef_HEAD_INIT, "zeps.journal._journalc",
    "The columnar journal reader's per-record loops in C (optional; see _journalc.c).", -1,
    jc_methods
};

PyMODINIT_FUNC
PyInit__journalc(void)
{
    crc_init();
#ifdef HAVE_HW_CRC
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2"))
        crc32c = crc_hw;
#endif
    PyObject *m = PyModule_Create(&jc_module);
    if (m == NULL)
        return NULL;
    /* the DELIVER-BATCH command id, from its one definition */
    PyObject *batch = PyImport_ImportModule("zeps.protocol.batch");
    if (batch == NULL)
        goto fail;
    PyObject *id = PyObject_GetAttrString(batch, "DELIVER_BATCH_ID");
    Py_DECREF(batch);
    if (id == NULL)
        goto fail;
    long v = PyLong_AsLong(id);
    Py_DECREF(id);
    if (v == -1 && PyErr_Occurred())
        goto fail;
    batch_head = 0xAAA500u | (uint32_t)(v & 0xFF);
    if (PyModule_AddStringConstant(m, "CRC", crc32c == crc_sw ? "table" : "sse4.2") < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
