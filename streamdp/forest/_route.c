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

/* bfs_expand(feature, n_nodes, kids_of, numeric_of, thr, m, height, out_feature, out_child, out_leaf, out_threshold,
 * n_leaves): streamdp.forest.layout.structure_arrays' checks and padded arrays in one pass per tree (the numpy
 * loop is the fallback and the reference). feature: int32, the trees' nodes one tree after the other (each in
 * 0..m, checked by the caller); n_nodes, n_leaves: int64 per tree; kids_of: int32 children per attribute
 * (m + 1: the zero column's 0); numeric_of: uint8 per attribute; thr: float64 split points of the numeric inner
 * nodes in order; out_*: int32 (float64 thresholds, or None: no numeric split) n_trees x width, C order.
 * Raises ValueError naming what is wrong: a tree whose splits' children are not its other nodes, a split whose
 * children come before it, a node deeper than `height`, thresholds that do not match the numeric splits.
 */
static PyObject *
bfs_expand(PyObject *self, PyObject *args)
{
    PyObject *of, *on, *ok, *onum, *othr, *oof, *ooc, *ool, *oot, *onl;
    long long m, height;
    Py_buffer bf = {0}, bn = {0}, bk = {0}, bnum = {0}, bthr = {0}, bof = {0}, boc = {0}, bol = {0}, bot = {0},
              bnl = {0};
    PyObject *result = NULL;
    const char *err = NULL;
    long long bad_tree = -1;
    if (!PyArg_ParseTuple(args, "OOOOOLLOOOOO", &of, &on, &ok, &onum, &othr, &m, &height, &oof, &ooc, &ool, &oot,
                          &onl))
        return NULL;
    if (get(of, &bf, 0, 4, "feature") < 0 || get(on, &bn, 0, 8, "n_nodes") < 0 || get(ok, &bk, 0, 4, "kids_of") < 0
        || get(onum, &bnum, 0, 1, "numeric_of") < 0 || get(othr, &bthr, 0, 8, "thr") < 0
        || get(oof, &bof, 1, 4, "out_feature") < 0 || get(ooc, &boc, 1, 4, "out_child") < 0
        || get(ool, &bol, 1, 4, "out_leaf") < 0 || get(onl, &bnl, 1, 8, "n_leaves") < 0)
        goto done;
    if (oot != Py_None && get(oot, &bot, 1, 8, "out_threshold") < 0)
        goto done;
    {
        const int32_t *feat = (const int32_t *)bf.buf, *kids = (const int32_t *)bk.buf;
        const int64_t *nn = (const int64_t *)bn.buf;
        const uint8_t *num = (const uint8_t *)bnum.buf;
        const double *thr = (const double *)bthr.buf;
        int32_t *of32 = (int32_t *)bof.buf, *oc32 = (int32_t *)boc.buf, *ol32 = (int32_t *)bol.buf;
        double *ot = bot.obj ? (double *)bot.buf : NULL;
        int64_t *nl = (int64_t *)bnl.buf;
        Py_ssize_t T = bn.len / 8, n_feat = bf.len / 4, n_thr = bthr.len / 8, n_attr = bk.len / 4;
        Py_ssize_t width = T ? bof.len / 4 / T : 0;
        Py_ssize_t start = 0, used = 0;
        if (bnl.len / 8 != T || boc.len != bof.len || bol.len != bof.len || (ot && bot.len != 2 * bof.len)
            || bnum.len != n_attr || m + 1 != n_attr) {
            PyErr_SetString(PyExc_TypeError, "bfs_expand: arrays of mismatched sizes");
            goto done;
        }
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t t = 0; t < T && !err; t++) {
            int64_t n = nn[t];
            if (n < 1 || n > width || start + n > n_feat) {
                err = "n_nodes does not fit the arrays";
                bad_tree = t;
                break;
            }
            const int32_t *f = feat + start;
            Py_ssize_t row = t * width;
            int64_t ends = 0, leaves = 0, level_end = 1, depth = 0;
            for (int64_t j = 0; j < n; j++) {
                int32_t a = f[j];
                if (a < 0 || a > m) { err = "a node tests an attribute outside the schema"; break; }
                if (j == level_end) { /* the next level: it ends after the children of the nodes before it */
                    depth++;
                    level_end = ends + 1;
                    if (depth > height) { err = "deeper than its height"; break; }
                }
                int64_t k = kids[a], first = ends + 1;
                ends += k;
                if (j < n - 1 && ends <= j) { err = "a split whose children come before it (not a tree)"; break; }
                of32[row + j] = a;
                if (k > 0) {
                    oc32[row + j] = (int32_t)first;
                    ol32[row + j] = -1;
                } else {
                    oc32[row + j] = (int32_t)j;
                    ol32[row + j] = (int32_t)leaves++;
                }
                if (num[a]) {
                    if (used >= n_thr) { err = "fewer thresholds than numeric splits"; break; }
                    if (ot) ot[row + j] = thr[used];
                    used++;
                } else if (ot) {
                    ot[row + j] = INFINITY;
                }
            }
            if (!err && ends != n - 1)
                err = "splits whose children are not the tree's other nodes";
            if (err) { bad_tree = t; break; }
            for (Py_ssize_t j = n; j < width; j++) {
                of32[row + j] = (int32_t)m;
                oc32[row + j] = (int32_t)j;
                ol32[row + j] = -1;
                if (ot) ot[row + j] = INFINITY;
            }
            nl[t] = leaves;
            start += n;
        }
        if (!err && start != n_feat)
            err = "nodes past the trees' n_nodes";
        if (!err && used != n_thr)
            err = "more thresholds than numeric splits";
        Py_END_ALLOW_THREADS
        if (err) {
            if (bad_tree >= 0)
                PyErr_Format(PyExc_ValueError, "tree %lld: %s", bad_tree, err);
            else
                PyErr_SetString(PyExc_ValueError, err);
            goto done;
        }
    }
    result = Py_NewRef(Py_None);
done:
    if (bf.obj) PyBuffer_Release(&bf);
    if (bn.obj) PyBuffer_Release(&bn);
    if (bk.obj) PyBuffer_Release(&bk);
    if (bnum.obj) PyBuffer_Release(&bnum);
    if (bthr.obj) PyBuffer_Release(&bthr);
    if (bof.obj) PyBuffer_Release(&bof);
    if (boc.obj) PyBuffer_Release(&boc);
    if (bol.obj) PyBuffer_Release(&bol);
    if (bot.obj) PyBuffer_Release(&bot);
    if (bnl.obj) PyBuffer_Release(&bnl);
    return result;
}

static PyMethodDef methods[] = {
    {"route", route, METH_VARARGS, "route(X, is_cat, packed, thresholds, leaves, out, n_trees, max_nodes, bits, height, block)"},
    {"bfs_expand", bfs_expand, METH_VARARGS,
     "bfs_expand(feature, n_nodes, kids_of, numeric_of, thr, m, height, out_feature, out_child, out_leaf, "
     "out_threshold, n_leaves)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_route", "ForestRouter's general router and the bfs structure layout's reader in C.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__route(void)
{
    return PyModule_Create(&module);
}
