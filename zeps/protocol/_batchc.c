/* zeps.protocol._batchc: the per-entry loops of the batch layout (zeps/protocol/batch.py) in C.
 *
 * Optional (issue 20): setup.py builds it when a C compiler and the Python headers are there,
 * and zeps works without it. Each function here has a pure-Python twin that is the definition
 * (zeps.protocol.batch.walk, zeps.clients.message.build_messages, MessageBatch.keys/bodies,
 * zeps.clients.batching.batch_frames_py); tests/test_batchc.py and tests/test_batchc_frames.py
 * check for any input, valid or not, that both give the same result or the same error message. The Python wrappers check a batch's count against its size before
 * calling in, so nothing here allocates for a forged count.
 *
 * entry = keylen u8 | key (UTF-8) | bodylen u32 BE | body
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static int has_high(const unsigned char *p, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i] & 0x80)
            return 1;
    return 0;
}

/* walk(buf, start, end, count, check_keys) -> offsets (count + 1 ints), or ValueError(reason).
 * The reasons are word for word those of zeps.protocol.batch.walk; as there, an entry is read
 * within the whole buffer (not only up to end), and an entry past end is reported after the
 * loop as the last one's. */
static PyObject *
batchc_walk(PyObject *self, PyObject *args)
{
    PyObject *obj;
    Py_ssize_t start, end, count;
    int check_keys;
    if (!PyArg_ParseTuple(args, "Onnnp", &obj, &start, &end, &count, &check_keys))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *b = (const unsigned char *)view.buf;
    Py_ssize_t len = view.len;
    PyObject *offsets = NULL;
    Py_ssize_t bad_key = -1;
    if (count < 1 || start < 0 || end < start) {
        PyErr_SetString(PyExc_ValueError, "bad arguments");
        goto done;
    }
    if (count >= PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(PyObject *)) {
        /* as PyList_New says for a list that large (count + 1 wrapped for 2**63 - 1: a
         * SystemError; the Python walk's [0] * (count + 1) cannot be made either) */
        PyErr_NoMemory();
        goto done;
    }
    offsets = PyList_New(count + 1);
    if (offsets == NULL)
        goto done;
    Py_ssize_t pos = start;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *o = PyLong_FromSsize_t(pos);
        if (o == NULL)
            goto fail;
        PyList_SET_ITEM(offsets, i, o);
        if (pos >= len) {
            PyErr_Format(PyExc_ValueError, "entry %zd of %zd runs past the end of the batch",
                         i, count);
            goto fail;
        }
        Py_ssize_t k = pos + 1, kend = k + b[pos];
        if (kend + 4 > len) {
            PyErr_Format(PyExc_ValueError, "entry %zd of %zd runs past the end of the batch",
                         i, count);
            goto fail;
        }
        if (check_keys && bad_key < 0 && has_high(b + k, kend - k)) {
            PyObject *t = PyUnicode_DecodeUTF8((const char *)b + k, kend - k, NULL);
            if (t == NULL) {
                /* only a UnicodeDecodeError says the key is bad (as in the Python walk); a
                 * MemoryError was reported as a bad key */
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                    goto fail;
                PyErr_Clear();
                bad_key = i;
            }
            Py_XDECREF(t);
        }
        pos = kend + 4 + (Py_ssize_t)be32(b + kend);
    }
    if (pos != end) {
        if (pos > end)
            PyErr_Format(PyExc_ValueError, "entry %zd of %zd runs past the end of the batch",
                         count - 1, count);
        else
            PyErr_Format(PyExc_ValueError, "%zd bytes after the last of %zd entries",
                         end - pos, count);
        goto fail;
    }
    if (bad_key >= 0) {
        PyErr_Format(PyExc_ValueError, "the key of entry %zd is not valid UTF-8", bad_key);
        goto fail;
    }
    PyObject *e = PyLong_FromSsize_t(end);
    if (e == NULL)
        goto fail;
    PyList_SET_ITEM(offsets, count, e);
    goto done;
fail:
    /* items not yet set are NULL: list_dealloc skips them */
    Py_CLEAR(offsets);
done:
    PyBuffer_Release(&view);
    return offsets;
}

/* The number of entries offsets (a list of n + 1 ints) stands for, with *bounds a copy of them
 * (PyMem: the caller frees it); or -1 with ValueError, TypeError, OverflowError or
 * MemoryError. The loops read the copy: Python code that the garbage collector runs while they
 * allocate (a finalizer, a gc callback) could shorten the caller's list after they took its
 * length, and they read past its end (tests/test_batchc.py). Nothing here makes a Python
 * object (a collection), so nothing runs between reading the list's length and its items. */
static Py_ssize_t
entry_bounds(PyObject *offsets, Py_ssize_t **bounds)
{
    *bounds = NULL;
    if (!PyList_Check(offsets) || PyList_GET_SIZE(offsets) < 1) {
        PyErr_SetString(PyExc_ValueError, "offsets: a non-empty list");
        return -1;
    }
    Py_ssize_t m = PyList_GET_SIZE(offsets);
    Py_ssize_t *v = PyMem_New(Py_ssize_t, m);
    if (v == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        v[i] = PyLong_AsSsize_t(PyList_GET_ITEM(offsets, i));    /* (no __index__: no code) */
        if (v[i] == -1 && PyErr_Occurred()) {
            PyMem_Free(v);
            return -1;
        }
    }
    *bounds = v;
    return m - 1;
}

/* Entry i's start and end from bounds, checked against the buffer (increasing, its key and
 * body length inside it): 0, or -1 with ValueError. */
static int
entry_span(const unsigned char *b, Py_ssize_t len, const Py_ssize_t *bounds, Py_ssize_t i,
           Py_ssize_t *start, Py_ssize_t *end)
{
    Py_ssize_t s = bounds[i], e = bounds[i + 1];
    if (s < 0 || e > len || s >= e || s + 5 + b[s] > e) {
        PyErr_Format(PyExc_ValueError, "entry %zd is not an entry of the frame", i);
        return -1;
    }
    *start = s;
    *end = e;
    return 0;
}

/* The key of an entry as text: the previous entry's str when its bytes are the same (keys come
 * in runs: one decode per run, not per message), else decoded (UTF-8, U+FFFD for undecodable
 * bytes). Returns a new reference; *prev / *prev_p / *prev_n track the last key. */
static PyObject *
key_text(const unsigned char *p, Py_ssize_t n, PyObject **prev, const unsigned char **prev_p,
         Py_ssize_t *prev_n)
{
    if (*prev != NULL && *prev_n == n && memcmp(*prev_p, p, (size_t)n) == 0) {
        Py_INCREF(*prev);
        return *prev;
    }
    PyObject *key = PyUnicode_DecodeUTF8((const char *)p, n, "replace");
    if (key == NULL)
        return NULL;
    Py_XSETREF(*prev, Py_NewRef(key));
    *prev_p = p;
    *prev_n = n;
    return key;
}

/* build_rows(cls, frame, offsets, first, timestamp, stream, headers) -> [cls(...), ...]:
 * entry i as the tuple subclass cls of (first + i, key as UTF-8 with U+FFFD for undecodable
 * bytes, body, timestamp, stream, headers), allocated as tuple.__new__(cls, ...) does.
 * ``first`` is a Python int: the wire's u64, or past it where a batch that claims more
 * sequences than are left was cut (MessageBatch.cut: first + k). Each sequence is the Python
 * int first + i, as in build_messages_py: computed in C while it fits in u64, else by Python
 * arithmetic (first past u64 or negative, or first + i past 2**64 - 1). */
static PyObject *
batchc_build_rows(PyObject *self, PyObject *args)
{
    PyObject *cls, *frame, *offsets, *first_obj, *ts, *stream, *headers;
    if (!PyArg_ParseTuple(args, "OOOOOOO", &cls, &frame, &offsets, &first_obj, &ts, &stream,
                          &headers))
        return NULL;
    if (!PyLong_CheckExact(first_obj)) {
        /* an int subclass's __add__ would run Python code in the loop below, over the
         * borrowed offsets (it could empty them) */
        PyErr_SetString(PyExc_TypeError, "first: an int");
        return NULL;
    }
    /* u64 (the wire's): sequences in C up to 2**64 - 1; else (negative, past u64) only
     * Python arithmetic */
    unsigned long long first = PyLong_AsUnsignedLongLong(first_obj);
    int first_in_u64 = 1;
    if (first == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return NULL;
        PyErr_Clear();
        first = 0;
        first_in_u64 = 0;
    }
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)
            || ((PyTypeObject *)cls)->tp_basicsize != PyTuple_Type.tp_basicsize) {
        PyErr_SetString(PyExc_TypeError, "cls: a tuple subclass with __slots__ = ()");
        return NULL;
    }
    PyTypeObject *tp = (PyTypeObject *)cls;
    Py_buffer view;
    if (PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *b = (const unsigned char *)view.buf;
    PyObject *out = NULL, *prev = NULL;
    const unsigned char *prev_p = NULL;
    Py_ssize_t prev_n = 0;
    Py_ssize_t *bounds = NULL;              /* offsets' copy */
    Py_ssize_t n = entry_bounds(offsets, &bounds);
    if (n < 0)
        goto done;
    out = PyList_New(n);
    if (out == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t s, e;
        if (entry_span(b, view.len, bounds, i, &s, &e) < 0)
            goto fail;
        Py_ssize_t kend = s + 1 + b[s];
        PyObject *row = tp->tp_alloc(tp, 6);
        if (row == NULL)
            goto fail;
        PyList_SET_ITEM(out, i, row);
        PyObject *seq;
        if (first_in_u64 && first <= ULLONG_MAX - (unsigned long long)i) {
            seq = PyLong_FromUnsignedLongLong(first + (unsigned long long)i);
        } else {
            PyObject *di = PyLong_FromSsize_t(i);
            seq = di == NULL ? NULL : PyNumber_Add(first_obj, di);
            Py_XDECREF(di);
        }
        if (seq == NULL)
            goto fail;
        PyTuple_SET_ITEM(row, 0, seq);
        PyObject *key = key_text(b + s + 1, kend - s - 1, &prev, &prev_p, &prev_n);
        if (key == NULL)
            goto fail;
        PyTuple_SET_ITEM(row, 1, key);
        PyObject *body = PyBytes_FromStringAndSize((const char *)b + kend + 4, e - kend - 4);
        if (body == NULL)
            goto fail;
        PyTuple_SET_ITEM(row, 2, body);
        Py_INCREF(ts);
        PyTuple_SET_ITEM(row, 3, ts);
        Py_INCREF(stream);
        PyTuple_SET_ITEM(row, 4, stream);
        Py_INCREF(headers);
        PyTuple_SET_ITEM(row, 5, headers);
    }
    goto done;
fail:
    /* a row not fully set holds NULLs: tuple dealloc skips them (Py_XDECREF) */
    Py_CLEAR(out);
done:
    Py_XDECREF(prev);
    PyMem_Free(bounds);
    PyBuffer_Release(&view);
    return out;
}

/* key_body_columns(frame, offsets) -> (keys, bodies): the entries' keys (UTF-8, U+FFFD for
 * undecodable bytes) and bodies as two lists. */
static PyObject *
batchc_key_body_columns(PyObject *self, PyObject *args)
{
    PyObject *frame, *offsets;
    if (!PyArg_ParseTuple(args, "OO", &frame, &offsets))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *b = (const unsigned char *)view.buf;
    PyObject *keys = NULL, *bodies = NULL, *out = NULL, *prev = NULL;
    const unsigned char *prev_p = NULL;
    Py_ssize_t prev_n = 0;
    Py_ssize_t *bounds = NULL;              /* offsets' copy */
    Py_ssize_t n = entry_bounds(offsets, &bounds);
    if (n < 0)
        goto done;
    keys = PyList_New(n);
    bodies = PyList_New(n);
    if (keys == NULL || bodies == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t s, e;
        if (entry_span(b, view.len, bounds, i, &s, &e) < 0)
            goto done;
        Py_ssize_t kend = s + 1 + b[s];
        PyObject *key = key_text(b + s + 1, kend - s - 1, &prev, &prev_p, &prev_n);
        if (key == NULL)
            goto done;
        PyList_SET_ITEM(keys, i, key);
        PyObject *body = PyBytes_FromStringAndSize((const char *)b + kend + 4, e - kend - 4);
        if (body == NULL)
            goto done;
        PyList_SET_ITEM(bodies, i, body);
    }
    out = PyTuple_Pack(2, keys, bodies);
done:
    Py_XDECREF(prev);
    Py_XDECREF(keys);
    Py_XDECREF(bodies);
    PyMem_Free(bounds);
    PyBuffer_Release(&view);
    return out;
}

/* ---------------------------------------------------------------- publish_frame
 * One frame of zeps.clients.batching.batch_frames_py (its definition): see there. */

#define PUBLISH_HEAD_SIZE 7          /* AA A5 3A | count u32 */
#define PUBLISH_PREFIX 3             /* AA A5 06 (a PUBLISH before its entry) */
#define MAX_BATCH_ENTRIES 4096       /* zeps.protocol.batch.MAX_BATCH_ENTRIES */

typedef struct {
    PyObject *key;                   /* strong refs: Python code run by a later message */
    PyObject *body;                  /* (bytes(), unpacking) cannot free what we point to */
    const char *k, *b;
    Py_ssize_t klen, blen;
} msg_t;

static void
msg_clear(msg_t *m)
{
    Py_CLEAR(m->key);
    Py_CLEAR(m->body);
}

/* The type's __name__ (type(o).__name__), for the messages of batch_frames_py. */
static void
type_error(const char *what, PyObject *o)
{
    PyObject *name = PyObject_GetAttrString((PyObject *)Py_TYPE(o), "__name__");
    if (name == NULL)
        return;
    PyErr_Format(PyExc_TypeError, "%s must be bytes or str, not %S", what, name);
    Py_DECREF(name);
}

/* Message m from item (a (key, body) pair): its key's UTF-8 and its body's bytes, checked in
 * the order batch_frames_py checks them. 0, or -1 with the exception it raises. */
static int
msg_of(PyObject *item, PyObject *pair, msg_t *m)
{
    PyObject *key, *body, *tmp = NULL;
    if ((PyTuple_CheckExact(item) && PyTuple_GET_SIZE(item) == 2)) {
        key = PyTuple_GET_ITEM(item, 0);
        body = PyTuple_GET_ITEM(item, 1);
    } else if (PyList_CheckExact(item) && PyList_GET_SIZE(item) == 2) {
        key = PyList_GET_ITEM(item, 0);
        body = PyList_GET_ITEM(item, 1);
    } else {                          /* anything else: unpacked by Python (its own errors) */
        tmp = PyObject_CallOneArg(pair, item);
        if (tmp == NULL)
            return -1;
        if (!PyTuple_CheckExact(tmp) || PyTuple_GET_SIZE(tmp) != 2) {
            Py_DECREF(tmp);
            PyErr_SetString(PyExc_SystemError, "pair() must return a 2-tuple");
            return -1;
        }
        key = PyTuple_GET_ITEM(tmp, 0);
        body = PyTuple_GET_ITEM(tmp, 1);
    }
    Py_INCREF(key);
    Py_INCREF(body);
    Py_XDECREF(tmp);
    m->key = key;
    m->body = NULL;
    if (PyBytes_CheckExact(body)) {
        m->body = body;
    } else {
        if (PyUnicode_Check(body)) {
            if (PyUnicode_IS_ASCII(body)) {       /* its characters are its UTF-8 */
                m->body = body;
                m->b = (const char *)PyUnicode_DATA(body);
                m->blen = PyUnicode_GET_LENGTH(body);
                goto key;
            }
            m->body = PyUnicode_AsUTF8String(body);     /* str.encode(body, "utf-8") */
        } else if (PyByteArray_Check(body) || PyMemoryView_Check(body)) {
            m->body = PyObject_CallOneArg((PyObject *)&PyBytes_Type, body);   /* bytes(body) */
        } else {
            type_error("body", body);
        }
        Py_DECREF(body);
        if (m->body == NULL)
            goto fail;
        if (!PyBytes_Check(m->body)) {
            PyErr_SetString(PyExc_TypeError, "bytes() returned non-bytes");
            goto fail;
        }
    }
    m->b = PyBytes_AS_STRING(m->body);
    m->blen = PyBytes_GET_SIZE(m->body);
key:
    if (!PyUnicode_Check(key)) {
        PyObject *name = PyObject_GetAttrString((PyObject *)Py_TYPE(key), "__name__");
        if (name != NULL) {
            PyErr_Format(PyExc_TypeError, "key must be str, not %S", name);
            Py_DECREF(name);
        }
        goto fail;
    }
    m->k = PyUnicode_AsUTF8AndSize(key, &m->klen);      /* kept in the str: keys repeat */
    if (m->k == NULL)
        goto fail;
    if (m->klen > 255) {
        PyErr_SetString(PyExc_ValueError, "key longer than 255 bytes");
        goto fail;
    }
    return 0;
fail:
    msg_clear(m);
    return -1;
}

/* The struct.error batch_frames_py raises for a body of 4 GiB or more (">I" packs its length). */
static void
u32_error(Py_ssize_t n)
{
    PyObject *st = PyImport_ImportModule("struct");
    if (st == NULL)
        return;
    PyObject *r = PyObject_CallMethod(st, "pack", "sn", ">I", n);
    Py_XDECREF(r);
    Py_DECREF(st);
    if (r != NULL)
        PyErr_SetString(PyExc_OverflowError, "body longer than 4 GiB");
}

static char *
put_entry(char *p, const msg_t *m)
{
    *p++ = (char)m->klen;
    memcpy(p, m->k, (size_t)m->klen);
    p += m->klen;
    uint32_t n = (uint32_t)m->blen;
    *p++ = (char)(n >> 24);
    *p++ = (char)(n >> 16);
    *p++ = (char)(n >> 8);
    *p++ = (char)n;
    memcpy(p, m->b, (size_t)m->blen);
    return p + m->blen;
}

/* publish_frame(items, start, max_batch, body_limit, pair) -> (frame, count): the next frame
 * batch_frames_py yields for the messages items[start:] (items: a list or a tuple of
 * (key, body) pairs; pair(item) unpacks an item that is not a 2-tuple or 2-list, as Python's
 * `key, body = item`). A PUBLISH-BATCH of as many messages as fit (at most max_batch bytes and
 * MAX_BATCH_ENTRIES), or a PUBLISH of one message (a batch of one, or a message alone: over
 * body_limit, or in no batch). A message that cannot be sent ends the frame before it; when it
 * is the first, its TypeError / ValueError is raised (as batch_frames_py raises it). Another
 * exception is raised at once (batch_frames_py does not catch it either). */
static PyObject *
batchc_publish_frame(PyObject *self, PyObject *args)
{
    PyObject *items, *pair;
    Py_ssize_t start, max_batch, body_limit;
    if (!PyArg_ParseTuple(args, "OnnnO", &items, &start, &max_batch, &body_limit, &pair))
        return NULL;
    int is_list = PyList_CheckExact(items);
    if (!is_list && !PyTuple_CheckExact(items)) {
        PyErr_SetString(PyExc_TypeError, "items: a list or a tuple");
        return NULL;
    }
    /* as batch_frames clamps them: below -1 every message is too big all the same, and
     * max_batch - size - fixed cannot wrap (it did for max_batch near -2**63: a batch where
     * batch_frames_py sends each message alone) */
    if (max_batch < -1)
        max_batch = -1;
    if (body_limit < -1)
        body_limit = -1;
    Py_ssize_t n_items = is_list ? PyList_GET_SIZE(items) : PyTuple_GET_SIZE(items);
    if (start < 0 || start >= n_items) {
        PyErr_SetString(PyExc_IndexError, "start: not an index of items");
        return NULL;
    }
    Py_INCREF(items);
    Py_ssize_t cap = n_items - start < 64 ? n_items - start : 64;
    msg_t *msgs = PyMem_Malloc(sizeof(msg_t) * (size_t)cap);
    PyObject *frame = NULL, *out = NULL;
    Py_ssize_t count = 0, size = PUBLISH_HEAD_SIZE;
    int alone = 0;
    if (msgs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = start;; i++) {
        /* Python code (pair(), bytes()) may have changed a list: look again each time */
        if (i >= (is_list ? PyList_GET_SIZE(items) : PyTuple_GET_SIZE(items)))
            break;
        PyObject *item = is_list ? PyList_GET_ITEM(items, i) : PyTuple_GET_ITEM(items, i);
        Py_INCREF(item);
        msg_t m;
        int r = msg_of(item, pair, &m);
        Py_DECREF(item);
        if (r < 0) {
            if (count > 0 && (PyErr_ExceptionMatches(PyExc_TypeError)
                              || PyErr_ExceptionMatches(PyExc_ValueError))) {
                PyErr_Clear();         /* the frame ends before it; the next call raises */
                break;
            }
            goto done;
        }
        /* entry = keylen u8 | key | bodylen u32 | body; klen <= 255, so no overflow below */
        Py_ssize_t fixed = 1 + m.klen + 4;
        int too_big = m.blen > body_limit || max_batch - PUBLISH_HEAD_SIZE - fixed < m.blen;
        if (too_big || count == MAX_BATCH_ENTRIES || max_batch - size - fixed < m.blen) {
            if (count > 0) {           /* it starts the next frame */
                msg_clear(&m);
                break;
            }
            alone = 1;                 /* too_big: a PUBLISH of its own */
        }
        if (m.blen > (Py_ssize_t)0xFFFFFFFF) {
            msg_clear(&m);
            u32_error(m.blen);
            goto done;
        }
        if (count == cap) {
            Py_ssize_t ncap = cap * 2 > MAX_BATCH_ENTRIES ? MAX_BATCH_ENTRIES : cap * 2;
            msg_t *grown = PyMem_Realloc(msgs, sizeof(msg_t) * (size_t)ncap);
            if (grown == NULL) {
                msg_clear(&m);
                PyErr_NoMemory();
                goto done;
            }
            msgs = grown;
            cap = ncap;
        }
        msgs[count++] = m;
        size += fixed + m.blen;
        if (alone)
            break;
    }
    /* count >= 1 here: the first message either raised or was taken */
    if (count == 1) {
        Py_ssize_t len = PUBLISH_PREFIX + size - PUBLISH_HEAD_SIZE;
        frame = PyBytes_FromStringAndSize(NULL, len);
        if (frame == NULL)
            goto done;
        char *p = PyBytes_AS_STRING(frame);
        p[0] = (char)0xAA;
        p[1] = (char)0xA5;
        p[2] = 6;                      /* PUBLISH */
        put_entry(p + PUBLISH_PREFIX, &msgs[0]);
    } else {
        frame = PyBytes_FromStringAndSize(NULL, size);
        if (frame == NULL)
            goto done;
        char *p = PyBytes_AS_STRING(frame);
        uint32_t c = (uint32_t)count;
        p[0] = (char)0xAA;
        p[1] = (char)0xA5;
        p[2] = 58;                     /* PUBLISH-BATCH */
        p[3] = (char)(c >> 24);
        p[4] = (char)(c >> 16);
        p[5] = (char)(c >> 8);
        p[6] = (char)c;
        p += PUBLISH_HEAD_SIZE;
        for (Py_ssize_t j = 0; j < count; j++)
            p = put_entry(p, &msgs[j]);
    }
    out = Py_BuildValue("(Nn)", frame, count);
done:
    if (msgs != NULL) {
        for (Py_ssize_t j = 0; j < count; j++)
            msg_clear(&msgs[j]);
        PyMem_Free(msgs);
    }
    Py_DECREF(items);
    return out;
}

static PyMethodDef batchc_methods[] = {
    {"walk", batchc_walk, METH_VARARGS,
     "walk(buf, start, end, count, check_keys) -> offsets, or ValueError(reason)."},
    {"build_rows", batchc_build_rows, METH_VARARGS,
     "build_rows(cls, frame, offsets, first, timestamp, stream, headers) -> list of cls."},
    {"key_body_columns", batchc_key_body_columns, METH_VARARGS,
     "key_body_columns(frame, offsets) -> (keys, bodies)."},
    {"publish_frame", batchc_publish_frame, METH_VARARGS,
     "publish_frame(items, start, max_batch, body_limit, pair) -> (frame, count)."},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef batchc_module = {
    PyModuleDef_HEAD_INIT, "zeps.protocol._batchc",
    "The per-entry loops of zeps.protocol.batch in C (optional; see _batchc.c).", -1,
    batchc_methods
};

PyMODINIT_FUNC
PyInit__batchc(void)
{
    return PyModule_Create(&batchc_module);
}
