/* streamdp.forest._route: ForestRouter's general router in C (optional; numpy is the fallback).
 *
 * route(X, is_cat, packed, thresholds, leaves, out, n_trees, max_nodes, bits, height, block) routes the rows
 * of X (float64, C-contiguous, n x m) down every tree of a padded forest and writes each row's leaf number in
 * each tree into out (int64, n x n_trees); is_cat holds m + 1 flags (the zero column's is 0). The forest is ForestRouter's: packed[node] = (tree * max_nodes + child)
 * << bits | feature (int32 or int64), thresholds (float64 per node, or None: no numeric split), leaves (int32
 * leaf number per node). Per step, as the numpy router (streamdp/forest/routing.py): feature m is the zero
 * column (a leaf, whose child is itself); a categorical attribute's branch is its code truncated to an
 * integer; a numeric one's is x > threshold (the zero column's x is 0). Every node number is clipped into
 * the forest, as numpy's take(mode="clip") does: a code outside its attribute's range cannot read outside
 * the arrays (its leaf is unspecified; the checked paths refuse such codes). Records go in blocks of `block`,
 * each block tree by tree (a tree's nodes stay in cache), in chunks of CHUNK level by level (a level's loads
 * are independent of one another).
 * Uses the CPython C API and the buffer protocol only; releases the GIL while it routes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

#define CHUNK 256

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)0)
#endif

static int
get(PyObject *o, Py_buffer *b, int writable, Py_ssize_t itemsize, const char *name)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(o, b, flags) < 0)
        return -1;
    if (b->itemsize != itemsize) {
        PyErr_Format(PyExc_TypeError, "route: %s must hold %zd-byte items, got %zd", name, itemsize, b->itemsize);
        PyBuffer_Release(b);
        b->obj = NULL;
        return -1;
    }
    return 0;
}

static int
cat_zero(Py_buffer *b)
{
    return ((const char *)b->buf)[b->len - 1] != 0;
}

static PyObject *
route(PyObject *self, PyObject *args)
{
    PyObject *ox, *oc, *op, *ot, *ol, *oo;
    Py_ssize_t T, M, block;
    int bits, height;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOOnniin", &ox, &oc, &op, &ot, &ol, &oo, &T, &M, &bits, &height, &block))
        return NULL;
    Py_buffer bx = {0}, bc = {0}, bp = {0}, bt = {0}, bl = {0}, bo = {0};
    PyObject *result = NULL;
    if (get(ox, &bx, 0, 8, "X") < 0 || get(oc, &bc, 0, 1, "is_cat") < 0 || PyObject_GetBuffer(op, &bp, PyBUF_C_CONTIGUOUS) < 0)
        goto done;
    if (ot != Py_None && get(ot, &bt, 0, 8, "thresholds") < 0)
        goto done;
    if (get(ol, &bl, 0, 4, "leaves") < 0 || get(oo, &bo, 1, 8, "out") < 0)
        goto done;
    Py_ssize_t m = bc.len - 1, total = T * M; /* is_cat: one flag per attribute, then 0 for the zero column */
    int wide = (bp.len == total * 8);
    if (T < 1 || M < 1 || m < 1 || cat_zero(&bc) || bits < 1 || bits > 16 || height < 0 || block < 1 || (bp.len != total * 4 && !wide)
        || bl.len != total * 4 || (ot != Py_None && bt.len != total * 8) || bx.len % (m * 8) != 0
        || bo.len != (bx.len / (m * 8)) * T * 8) {
        PyErr_SetString(PyExc_ValueError, "route: array sizes do not match the forest");
        goto done;
    }
    {
        static const double no_split = HUGE_VAL; /* every threshold +inf: nothing passes */
        const int has_thr = ot != Py_None;
        const double *restrict X = bx.buf, *restrict thrs = has_thr ? bt.buf : &no_split;
        const int64_t kmask = has_thr ? -1 : 0; /* without thresholds every node reads the one +inf */
        const char *restrict cat = bc.buf;
        const int32_t *restrict p32 = wide ? NULL : bp.buf, *restrict leaf = bl.buf;
        const int64_t *restrict p64 = wide ? bp.buf : NULL;
        int64_t *restrict out = bo.buf;
        Py_ssize_t n = bx.len / (m * 8);
        const int64_t mask = ((int64_t)1 << bits) - 1, last = total - 1;
        int64_t node[CHUNK];
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t b0 = 0; b0 < n; b0 += block) {
            Py_ssize_t b1 = n - b0 < block ? n : b0 + block;
            for (Py_ssize_t t = 0; t < T; t++) {
                for (Py_ssize_t r0 = b0; r0 < b1; r0 += CHUNK) {
                    Py_ssize_t c = b1 - r0 < CHUNK ? b1 - r0 : CHUNK;
                    const double *restrict xr = X + r0 * m;
                    for (Py_ssize_t i = 0; i < c; i++)
                        node[i] = t * M;
                    for (int h = 0; h < height; h++) {
                        for (Py_ssize_t i = 0; i < c; i++) {
                            /* branch-free: node kinds mix at random, a mispredicted branch costs more than
                               the arithmetic of both kinds; the threshold's load does not wait for the word's */
                            int64_t k = node[i];
                            int64_t w = wide ? p64[k] : (int64_t)p32[k];
                            double tv = thrs[k & kmask];
                            int64_t f = w & mask, nx = w >> bits;
                            int inner = f < m, is_c = cat[f];
                            double x = xr[i * m + (inner ? f : 0)];
                            x = inner ? x : 0.0;
                            /* a code truncated toward zero as numpy's cast; NaN and huge values far below 0 */
                            double xc = (x > -1e18 && x < 1e18) ? x : -1e18;
                            nx += is_c ? (int64_t)xc : (int64_t)(x > tv);
                            nx = nx < 0 ? 0 : (nx > last ? last : nx);
                            node[i] = nx;
                            /* the next level's loads start now, while this level's other pairs route */
                            PREFETCH(wide ? (const void *)(p64 + nx) : (const void *)(p32 + nx));
                            PREFETCH(thrs + (nx & kmask));
                        }
                    }
                    for (Py_ssize_t i = 0; i < c; i++)
                        out[(r0 + i) * T + t] = leaf[node[i]];
                }
            }
        }
        Py_END_ALLOW_THREADS
    }
    result = Py_NewRef(Py_None);
done:
    if (bx.obj) PyBuffer_Release(&bx);
    if (bc.obj) PyBuffer_Release(&bc);
    if (bp.obj) PyBuffer_Release(&bp);
    if (bt.obj) PyBuffer_Release(&bt);
    if (bl.obj) PyBuffer_Release(&bl);
    if (bo.obj) PyBuffer_Release(&bo);
    return result;
}

static PyMethodDef methods[] = {
    {"route", route, METH_VARARGS, "route(X, is_cat, packed, thresholds, leaves, out, n_trees, max_nodes, bits, height, block)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_route", "ForestRouter's general router in C.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__route(void)
{
    return PyModule_Create(&module);
}
