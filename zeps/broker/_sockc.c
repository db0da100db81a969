/* zeps.broker._sockc: the broker shell's socket loops (zeps/broker/sockio.py) in C.
 *
 * Optional (issue 20): setup.py builds it when a C compiler and the Python headers are there,
 * and zeps works without it. The Python loops of zeps.broker.sockio are the definition and the
 * fallback; tests/test_sockio.py checks over real sockets that both read the same messages in
 * the same order, stop for the same reasons, and send the same frames.
 *
 * Why: a round's reads and sends went through pyzmq's Cython methods, four calls a message,
 * each building a SocketOption enum or a Frame before libzmq ran (bench/bench_stages.py: the
 * broker's loop thread about 55 us a message, the C proxy's 11). Here one call reads a chunk of
 * a round's messages and one sends an outbox.
 *
 * No libzmq header or library is needed at build time: sockio.py finds the libzmq that pyzmq
 * loaded in this process and passes its functions' addresses to bind(), so the sockets' handles
 * (pyzmq's Socket.underlying) are always used with the library that made them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    unsigned char _[64] __attribute__((aligned(sizeof(void *))));
} zmsg_t;                                   /* zmq_msg_t's size and alignment (zmq.h 4.x) */

typedef int (*getsockopt_fn)(void *, int, void *, size_t *);
typedef int (*msg_init_fn)(zmsg_t *);
typedef int (*msg_recv_fn)(zmsg_t *, void *, int);
typedef void *(*msg_data_fn)(zmsg_t *);
typedef size_t (*msg_size_fn)(const zmsg_t *);
typedef int (*msg_more_fn)(const zmsg_t *);
typedef int (*msg_close_fn)(zmsg_t *);
typedef int (*send_fn)(void *, const void *, size_t, int);
typedef int (*errno_fn)(void);
typedef const char *(*msg_gets_fn)(const zmsg_t *, const char *);

static getsockopt_fn z_getsockopt;
static msg_init_fn z_msg_init;
static msg_recv_fn z_msg_recv;
static msg_data_fn z_msg_data;
static msg_size_fn z_msg_size;
static msg_more_fn z_msg_more;
static msg_close_fn z_msg_close;
static send_fn z_send;
static errno_fn z_errno;
static msg_gets_fn z_msg_gets;
static PyObject *z_error_class;             /* zmq.ZMQError: raised with libzmq's errno */

/* libzmq's constants (zmq.h); sockio.py checks them against pyzmq's before binding. */
#define Z_DONTWAIT 1
#define Z_SNDMORE 2
#define Z_EVENTS 15
#define Z_POLLIN 1

/* What drain() says when it returns: what sockio.py calls DRAINED, LIMIT, NEW and PARTS. */
#define DRAINED 0
#define LIMIT 1
#define NEW 2
#define PARTS 3

static int bound(void)
{
    if (z_send == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "zeps.broker._sockc: bind() was not called");
        return 0;
    }
    return 1;
}

static PyObject *zmq_error(int err)
{
    PyObject *e = PyObject_CallFunction(z_error_class, "i", err);
    if (e != NULL) {
        PyErr_SetObject(z_error_class, e);
        Py_DECREF(e);
    }
    return NULL;
}

static PyObject *sockc_bind(PyObject *self, PyObject *args)
{
    unsigned long long a[10];
    PyObject *error_class;
    if (!PyArg_ParseTuple(args, "KKKKKKKKKKO", &a[0], &a[1], &a[2], &a[3], &a[4], &a[5], &a[6],
                          &a[7], &a[8], &a[9], &error_class))
        return NULL;
    for (int i = 0; i < 10; i++)
        if (a[i] == 0) {
            PyErr_SetString(PyExc_ValueError, "bind: a null function address");
            return NULL;
        }
    z_getsockopt = (getsockopt_fn)(uintptr_t)a[0];
    z_msg_init = (msg_init_fn)(uintptr_t)a[1];
    z_msg_recv = (msg_recv_fn)(uintptr_t)a[2];
    z_msg_data = (msg_data_fn)(uintptr_t)a[3];
    z_msg_size = (msg_size_fn)(uintptr_t)a[4];
    z_msg_more = (msg_more_fn)(uintptr_t)a[5];
    z_msg_close = (msg_close_fn)(uintptr_t)a[6];
    z_send = (send_fn)(uintptr_t)a[7];
    z_errno = (errno_fn)(uintptr_t)a[8];
    z_msg_gets = (msg_gets_fn)(uintptr_t)a[9];
    Py_INCREF(error_class);
    Py_XSETREF(z_error_class, error_class);
    Py_RETURN_NONE;
}

/* ZMQ_EVENTS of the socket, or -1 with the error set. */
static int events_of(void *h)
{
    int ev = 0;
    size_t len = sizeof ev;
    for (;;) {
        if (z_getsockopt(h, Z_EVENTS, &ev, &len) == 0)
            return ev;
        int err = z_errno();
        if (err != EINTR) {
            zmq_error(err);
            return -1;
        }
    }
}

static void *handle_of(PyObject *o)
{
    void *h = PyLong_AsVoidPtr(o);
    if (h == NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "a null socket handle");
    return h;
}

/* A fast-call function's socket handle (its first argument), after checking the count of its
 * arguments and that bind() was called; NULL with the error set. */
static void *socket_of(const char *name, PyObject *const *args, Py_ssize_t nargs,
                       Py_ssize_t want)
{
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd arguments (%zd given)", name, want, nargs);
        return NULL;
    }
    if (!bound())
        return NULL;
    return handle_of(args[0]);
}

/* readable(handle) -> bool: ZMQ_EVENTS says POLLIN. */
static PyObject *sockc_readable(PyObject *self, PyObject *arg)
{
    if (!bound())
        return NULL;
    void *h = handle_of(arg);
    if (h == NULL)
        return NULL;
    int ev = events_of(h);
    if (ev < 0)
        return NULL;
    return PyBool_FromLong(ev & Z_POLLIN);
}

/* One frame off the socket into msg without waiting: 0; or -1 with *again set when there is
 * none, or -1 with the error set (msg closed either way). */
static int recv_msg(void *h, zmsg_t *msg, int *again)
{
    *again = 0;
    z_msg_init(msg);
    for (;;) {
        if (z_msg_recv(msg, h, Z_DONTWAIT) >= 0)
            return 0;
        int err = z_errno();
        if (err == EINTR)
            continue;
        z_msg_close(msg);
        if (err == EAGAIN)
            *again = 1;
        else
            zmq_error(err);
        return -1;
    }
}

/* The next frame of a message that said more were coming was not there: a ROUTER hands a
 * message over whole, so this cannot happen. NULL with RuntimeError. */
static PyObject *frame_missing(void)
{
    PyErr_SetString(PyExc_RuntimeError, "a message's frame went missing");
    return NULL;
}

/* One frame off the socket without waiting: a new bytes object (*more set), NULL with
 * *again set when there is none, or NULL with the error set. */
static PyObject *recv_frame(void *h, int *more, int *again)
{
    zmsg_t msg;
    if (recv_msg(h, &msg, again) < 0)
        return NULL;
    PyObject *b = PyBytes_FromStringAndSize((const char *)z_msg_data(&msg),
                                            (Py_ssize_t)z_msg_size(&msg));
    *more = z_msg_more(&msg);
    z_msg_close(&msg);
    return b;
}

/* Is the identity frame ``msg`` (of an identity in ``known``) from another key than the one
 * ``known`` maps it to (a str, the CurveZMQ User-Id its connection had)? 1, 0, or -1 with the
 * error set. */
static int other_key(PyObject *known, PyObject *ident, zmsg_t *msg)
{
    PyObject *want = PyDict_GetItemWithError(known, ident);     /* borrowed */
    if (want == NULL)
        return PyErr_Occurred() ? -1 : 1;
    const char *want_s = PyUnicode_AsUTF8(want);
    if (want_s == NULL)
        return -1;
    const char *got = z_msg_gets(msg, "User-Id");
    return got == NULL || strcmp(got, want_s) != 0;
}

/* drain(handle, known, max_n, max_bytes, ask_first, readable[, by_key]) -> (messages, status,
 * ident)
 * zeps.broker.sockio.drain_py, word for word: see its docstring. */
static PyObject *sockc_drain(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    void *h = socket_of("drain", args, nargs, nargs == 7 ? 7 : 6);
    if (h == NULL)
        return NULL;
    PyObject *known = args[1];
    int by_key = 0;
    if (nargs == 7) {
        by_key = PyObject_IsTrue(args[6]);
        if (by_key < 0)
            return NULL;
        if (by_key && !PyDict_CheckExact(known)) {
            PyErr_SetString(PyExc_TypeError, "drain: by_key needs known as a dict");
            return NULL;
        }
    }
    /* each checked before the next: readable's __bool__ (Python code) must not run with an
     * error pending (a SystemError that hid it; an assertion in a debug interpreter) */
    Py_ssize_t max_n = PyLong_AsSsize_t(args[2]);
    if (max_n == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t max_bytes = PyLong_AsSsize_t(args[3]);
    if (max_bytes == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t ask_first = PyLong_AsSsize_t(args[4]);
    if (ask_first == -1 && PyErr_Occurred())
        return NULL;
    int readable = PyObject_IsTrue(args[5]);
    if (readable < 0)
        return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    Py_ssize_t n = 0, size = 0;
    int status = LIMIT, more = 0, again = 0;
    PyObject *ident = NULL;
    while (n < max_n && size < max_bytes) {
        if (n < ask_first && !(n == 0 && readable)) {
            int ev = events_of(h);
            if (ev < 0)
                goto fail;
            if (!(ev & Z_POLLIN)) {
                status = DRAINED;
                break;
            }
        }
        zmsg_t idmsg;
        if (recv_msg(h, &idmsg, &again) < 0) {
            if (!again)
                goto fail;
            status = DRAINED;
            break;
        }
        ident = PyBytes_FromStringAndSize((const char *)z_msg_data(&idmsg),
                                          (Py_ssize_t)z_msg_size(&idmsg));
        if (ident == NULL) {
            z_msg_close(&idmsg);
            goto fail;
        }
        int is_known = PySequence_Contains(known, ident);
        if (is_known > 0 && by_key) {
            int other = other_key(known, ident, &idmsg);
            is_known = other < 0 ? -1 : !other;
        }
        z_msg_close(&idmsg);
        if (is_known < 0)
            goto fail;
        if (!is_known) {
            status = NEW;
            break;                       /* ident is returned; its frames are the caller's */
        }
        PyObject *first = recv_frame(h, &more, &again);
        if (first == NULL) {
            if (again)
                frame_missing();
            goto fail;
        }
        if (more) {                      /* several frames: the rest is skip()'s */
            PyObject *two = PyTuple_Pack(2, ident, first);
            Py_DECREF(first);
            Py_CLEAR(ident);
            if (two == NULL)
                goto fail;
            ident = two;
            status = PARTS;
            break;
        }
        PyObject *frames = PyList_New(1);
        if (frames == NULL) {
            Py_DECREF(first);
            goto fail;
        }
        size += PyBytes_GET_SIZE(first);
        PyList_SET_ITEM(frames, 0, first);
        PyObject *pair = PyTuple_Pack(2, ident, frames);
        Py_DECREF(frames);
        Py_CLEAR(ident);
        if (pair == NULL)
            goto fail;
        int rc = PyList_Append(out, pair);
        Py_DECREF(pair);
        if (rc < 0)
            goto fail;
        n++;
    }
    PyObject *result = Py_BuildValue("(NiO)", out, status, ident != NULL ? ident : Py_None);
    Py_XDECREF(ident);
    return result;
fail:
    Py_XDECREF(ident);
    Py_DECREF(out);
    return NULL;
}

/* skip(handle, max_n) -> (read, more)
 * zeps.broker.sockio.skip_py, word for word: see its docstring. No frame is kept. */
static PyObject *sockc_skip(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    void *h = socket_of("skip", args, nargs, 2);
    if (h == NULL)
        return NULL;
    Py_ssize_t max_n = PyLong_AsSsize_t(args[1]);
    if (max_n == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t n = 0;
    int more = 1, again;
    zmsg_t msg;
    while (n < max_n && more) {
        if (recv_msg(h, &msg, &again) < 0)
            return again ? frame_missing() : NULL;
        more = z_msg_more(&msg);
        z_msg_close(&msg);
        n++;
    }
    return Py_BuildValue("(nO)", n, more ? Py_True : Py_False);
}

static int send_one(void *h, PyObject *obj, int flags, int *err)
{
    Py_buffer view;
    const void *buf;
    Py_ssize_t len;
    int have_view = 0;
    if (PyBytes_Check(obj)) {
        buf = PyBytes_AS_STRING(obj);
        len = PyBytes_GET_SIZE(obj);
    } else {
        if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
            return -1;
        have_view = 1;
        buf = view.buf;
        len = view.len;
    }
    int rc;
    for (;;) {
        rc = z_send(h, buf, (size_t)len, flags);
        if (rc >= 0) {
            *err = 0;
            break;
        }
        *err = z_errno();
        if (*err != EINTR)
            break;
    }
    if (have_view)
        PyBuffer_Release(&view);
    return 0;
}

/* send_all(handle, out, start, blocked) -> (index, errno)
 * zeps.broker.sockio.send_all_py, word for word: see its docstring. */
static PyObject *sockc_send_all(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    void *h = socket_of("send_all", args, nargs, 4);
    if (h == NULL)
        return NULL;
    PyObject *out = args[1];
    if (!PyList_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "send_all: out must be a list");
        return NULL;
    }
    Py_ssize_t i = PyLong_AsSsize_t(args[2]);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    if (i < 0) {
        PyErr_SetString(PyExc_ValueError, "send_all: start must be >= 0");
        return NULL;
    }
    PyObject *blocked = args[3];
    int err = 0;
    /* out[start:len(out)] as send_all_py takes it (n = len(out) once: pairs that blocked's
     * membership test appends are not sent, where this loop never ended for one that appends
     * at each test), and no further than the list's length now (the test may shorten it) */
    Py_ssize_t n = PyList_GET_SIZE(out);
    for (; i < n && i < PyList_GET_SIZE(out); i++) {
        PyObject *pair = PyList_GET_ITEM(out, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "send_all: out holds (identity, frame) pairs");
            return NULL;
        }
        Py_INCREF(pair);     /* held: the membership test below may run Python code */
        PyObject *ident = PyTuple_GET_ITEM(pair, 0);
        int stop = 0, failed = 0;
        if (blocked != Py_None) {
            int in = PySequence_Contains(blocked, ident);
            failed = in < 0;
            stop = in > 0;
        }
        if (!failed && !stop) {
            failed = send_one(h, ident, Z_DONTWAIT | Z_SNDMORE, &err) < 0;
            if (!failed && !err)
                failed = send_one(h, PyTuple_GET_ITEM(pair, 1), Z_DONTWAIT, &err) < 0;
        }
        Py_DECREF(pair);
        if (failed)
            return NULL;
        if (stop || err)
            break;
    }
    return Py_BuildValue("(ni)", i, err);
}

static PyMethodDef sockc_methods[] = {
    {"bind", sockc_bind, METH_VARARGS,
     "bind(getsockopt, msg_init, msg_recv, msg_data, msg_size, msg_more, msg_close, send, "
     "errno, error_class): libzmq's functions' addresses and the exception of its errors"},
    {"readable", sockc_readable, METH_O, "readable(handle) -> ZMQ_EVENTS has POLLIN"},
    {"drain", (PyCFunction)(void (*)(void))sockc_drain, METH_FASTCALL,
     "drain(handle, known, max_n, max_bytes, ask_first, readable[, by_key]) -> "
     "(messages, status, ident)"},
    {"skip", (PyCFunction)(void (*)(void))sockc_skip, METH_FASTCALL,
     "skip(handle, max_n) -> (read, more): drop frames of the message being read"},
    {"send_all", (PyCFunction)(void (*)(void))sockc_send_all, METH_FASTCALL,
     "send_all(handle, out, start, blocked) -> (index, errno)"},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef sockc_module = {
    PyModuleDef_HEAD_INIT, "zeps.broker._sockc",
    "The broker shell's socket loops in C (optional; see _sockc.c).", -1, sockc_methods
};

PyMODINIT_FUNC
PyInit__sockc(void)
{
    return PyModule_Create(&sockc_module);
}
