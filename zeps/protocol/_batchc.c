/* zeps.protocol._batchc: the per-entry loops of the batch layout (zeps/protocol/batch.py) in C.
 *
 * Optional (issue 20): setup.py builds it when a C compiler and the Python headers are there,
 * and zeps works without it. Each function here has a pure-Python twin that is the definition
 * (zeps.protocol.batch.walk, zeps.clients.message.build_messages, MessageBatch.keys/bodies);
 * tests/test_batchc.py checks for any input, valid or not, that both give the same result or
 * the same error message. The Python wrappers check a batch's count against its size before
 * calling in, so nothing here allocates for a forged count.
 *
 * entry = keylen u8 | key (UTF-8) | bodylen u32 BE | body
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
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

/* The number of entries offsets (a list of n + 1 ints) stands for, or -1 with ValueError. */
static Py_ssize_t
entry_count(PyObject *offsets)
{
    if (!PyList_Check(offsets) || PyList_GET_SIZE(offsets) < 1) {
        PyErr_SetString(PyExc_ValueError, "offsets: a non-empty list");
        return -1;
    }
    return PyList_GET_SIZE(offsets) - 1;
}

/* Entry i's start and end from offsets, checked against the buffer (increasing, its key and
 * body length inside it): 0, or -1 with ValueError. */
static int
entry_span(const unsigned char *b, Py_ssize_t len, PyObject *offsets, Py_ssize_t i,
           Py_ssize_t *start, Py_ssize_t *end)
{
    Py_ssize_t s = PyLong_AsSsize_t(PyList_GET_ITEM(offsets, i));
    Py_ssize_t e = PyLong_AsSsize_t(PyList_GET_ITEM(offsets, i + 1));
    if ((s == -1 || e == -1) && PyErr_Occurred())
        return -1;
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
 * bytes, body, timestamp, stream, headers), allocated as tuple.__new__(cls, ...) does. */
static PyObject *
batchc_build_rows(PyObject *self, PyObject *args)
{
    PyObject *cls, *frame, *offsets, *ts, *stream, *headers;
    long long first;
    if (!PyArg_ParseTuple(args, "OOOLOOO", &cls, &frame, &offsets, &first, &ts, &stream,
                          &headers))
        return NULL;
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
    Py_ssize_t n = entry_count(offsets);
    if (n < 0)
        goto done;
    out = PyList_New(n);
    if (out == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t s, e;
        if (entry_span(b, view.len, offsets, i, &s, &e) < 0)
            goto fail;
        Py_ssize_t kend = s + 1 + b[s];
        PyObject *row = tp->tp_alloc(tp, 6);
        if (row == NULL)
            goto fail;
        PyList_SET_ITEM(out, i, row);
        PyObject *seq = PyLong_FromLongLong(first + i);
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
    Py_ssize_t n = entry_count(offsets);
    if (n < 0)
        goto done;
    keys = PyList_New(n);
    bodies = PyList_New(n);
    if (keys == NULL || bodies == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t s, e;
        if (entry_span(b, view.len, offsets, i, &s, &e) < 0)
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
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef batchc_methods[] = {
    {"walk", batchc_walk, METH_VARARGS,
     "walk(buf, start, end, count, check_keys) -> offsets, or ValueError(reason)."},
    {"build_rows", batchc_build_rows, METH_VARARGS,
     "build_rows(cls, frame, offsets, first, timestamp, stream, headers) -> list of cls."},
    {"key_body_columns", batchc_key_body_columns, METH_VARARGS,
     "key_body_columns(frame, offsets) -> (keys, bodies)."},
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
