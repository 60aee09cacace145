/* streamdp.river._kernel: the river loop's one-record path in C (optional; plain Python is the fallback).
 *
 * A Kernel mirrors, for one schema, three pieces of Python and gives the same objects / the same floats:
 *   encode(x)  RecordEncoder.source's generated encoder (streamdp/river/encoding.py); any value it does
 *              not handle inline (a type other than exact int/str/float, a dict subclass, ...) is passed
 *              to the Python encoder given at construction, which answers for the whole record;
 *   proba(x)   ForestView.proba_list's fast path (streamdp/river/forest_view.py): encode, route the record
 *              through every random tree, sum the trees' rows column by column in tree order, left to
 *              right (streamdp.estimation.seq_sum: numpy's order; not Python 3.12's compensated sum()),
 *              then streamdp.estimation.path_proba_one's chain (posterior_one depth by depth), or the leaf rule's
 *              normalised sums. None when the record is not for this path (an unknown value, a value type
 *              handled by Python only, no rows set): the caller then runs the Python path;
 *   chain(pooled, prior)  the chain alone (tests).
 * The estimation constants (KAPPA, SHARE_SPREAD) and the release's root numbers are passed in by the caller
 * from streamdp.estimation; a change of the rule's form must be mirrored here (tests/test_river_kernel.py
 * compares the chain with the Python one on random inputs).
 * Build with -ffp-contract=off (setup.py): a fused multiply-add would change the last bits.
 * Memory safety (the arguments come from Python): every size product is overflow-checked before a buffer's
 * length is compared with it; every method runs under a busy flag, so Python code the kernel runs (a record
 * key's __eq__, a bound's __float__) cannot change or free what it is reading (RuntimeError); __init__ is
 * atomic (a failed one leaves a kernel whose methods raise). tests/river/test_kernel_safety.py; run under
 * AddressSanitizer with .ci/kernel_asan.py.
 */
/* The estimate the chain mirrors (streamdp.river.kernel.CHAIN): a build of another leaves the Python path on. */
#define KERNEL_CHAIN 2
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    Py_ssize_t m;                       /* attributes */
    PyObject **name, **alt, **lookup;   /* per attribute: key, integer key or NULL, code table (categorical) or NULL */
    PyObject **lo_o, **hi_o, **mid_o;   /* numeric bounds as the encoder's objects (returned by encode) */
    double *lo, *hi, *mid;              /* ... and as doubles (exact: checked by the caller) */
    char *is_cat;
    PyObject *fallback;                 /* the Python encoder: encode() of a record this code does not handle */
    PyObject *false_key, *true_key;     /* streamdp.records.coding.lookup_key(False), lookup_key(True) */
    /* trees (set_trees) */
    Py_ssize_t T, n_nodes;
    int *feat;                          /* attribute tested at a node, -1 at a leaf */
    double *thr;                        /* threshold of a numeric split */
    Py_ssize_t *nxt;                    /* global index of the first child; at a leaf, its flat leaf number */
    Py_ssize_t *root;                   /* global index of each tree's root */
    Py_ssize_t *arity;                  /* children of a split on each attribute */
    /* rows (set_rows) */
    int mode;                           /* 0: none (proba returns None), 1: path rows + chain, 2: leaf sums,
                                           3: path rows gathered from the nodes (set_paths, set_nodes) + chain */
    Py_ssize_t n_rows, W, C;
    double *rows, *prior;
    Py_ssize_t *paths, n_paths, H;      /* mode 3, per structure: per flat leaf, its node at depths 1..H */
    double *yv;                         /* mode 3, per release: per node, its counts then its total's variance */
    Py_ssize_t n_yv;               /* prior: the release's prior (mode 2: its list(prior) when no total) */
    PyObject *prior_list;               /* mode 2 with no positive total: list(prior) */
    double r0, v0, kappa, spread;       /* the chain's: the roots' records and variance, KAPPA, SHARE_SPREAD */
    /* scratch */
    double *a, *pooled, *p, *q;
    Py_ssize_t *leaf;
    int busy;                           /* inside an entry point (which may run Python code): no other may change k */
    int ready;                          /* __init__ succeeded: every method checks it */
} Kernel;

/* a * b into *out, or -1 with ValueError when it does not fit a Py_ssize_t (sizes from the caller) */
static int
mul_size(Py_ssize_t a, Py_ssize_t b, Py_ssize_t *out, const char *what)
{
    if (a < 0 || b < 0 || (a > 0 && b > PY_SSIZE_T_MAX / a)) {
        PyErr_Format(PyExc_ValueError, "%s: size %zd * %zd is out of range", what, a, b);
        return -1;
    }
    *out = a * b;
    return 0;
}

/* The entry guard of every method: initialised, and not inside another call of this kernel (a record's key
 * __eq__, a bound's __float__, a buffer export or a finaliser can run Python code that calls back in). */
static int
enter(Kernel *k)
{
    if (!k->ready) {
        PyErr_SetString(PyExc_RuntimeError, "Kernel is not initialised (its __init__ failed or was not called)");
        return -1;
    }
    if (k->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Kernel is in use: a call back into it from Python code it ran");
        return -1;
    }
    k->busy = 1;
    return 0;
}

/* ---- streamdp.estimation.seq_sum: left to right from 0 + the first item (numpy's order; no compensation) ---- */
static inline double
py_sum(const double *x, Py_ssize_t n, Py_ssize_t stride)
{
    if (n <= 0)
        return 0.0;
    double f = 0.0 + x[0];
    for (Py_ssize_t i = 1; i < n; i++)
        f += x[i * stride];
    return f;
}

/* ---- streamdp.estimation.path_proba_one (p: in the prior, out the estimate; q: scratch of C): from the roots'
 * records r0 and total variance v0, posterior_one depth by depth (the same operations in the same order) ---- */
static void
chain(const double *pooled, Py_ssize_t W, Py_ssize_t C, double r0, double v0, double kappa, double spread, double *p,
      double *q)
{
    double m = r0, above = v0;
    for (Py_ssize_t d = 0; d < W; d += C + 1) {
        const double *y = pooled + d;
        if (d + C >= W)
            break;  /* a short last slice: cannot happen with whole rows */
        if (d > 0) {  /* the same pool as one level up: nothing new to weigh */
            Py_ssize_t c = 0;
            while (c <= C && y[c] == y[c - C - 1])
                c++;
            if (c > C)
                continue;
        }
        double var = y[C];
        double share = above > 0 ? var / above : 0.0;
        above = var;
        double t = py_sum(y, C, 1);
        double v = var > 0 ? var : 0.0;
        double mm = share > 0 ? m * share : m;
        double sm = spread * mm;
        double vm = sm * sm + 1.0;
        double n = v > 0 ? (t / v + mm / vm) / (1.0 / v + 1.0 / vm) : t;
        if (!(n > 0)) {
            m = 0.0;
            continue;
        }
        m = n;
        double at = t < 0 ? -t : t;
        double den = at > n ? at : n;
        double nn = n * n, kn = kappa * n, s2 = v / (double)C;
        for (Py_ssize_t c = 0; c < C; c++) {
            double pq = p[c] * (1.0 - p[c]);
            if (!(pq > 1e-6))
                pq = 1e-6;
            double w = nn / (nn + kn + kappa * s2 / pq);
            double x = p[c] + w * (y[c] - t * p[c]) / den;
            q[c] = x > 0 ? x : 0.0;
        }
        double s = py_sum(q, C, 1);
        if (s > 0)
            for (Py_ssize_t c = 0; c < C; c++)
                p[c] = q[c] / s;
    }
}

/* ---- encoding one attribute: 0 done, 1 not handled here (the Python path), -1 error ---- */
static int
enc_value(Kernel *k, PyObject *x, Py_ssize_t j, double *d, PyObject **o)
{
    PyObject *v = PyDict_GetItemWithError(x, k->name[j]);
    if (v == NULL) {
        if (PyErr_Occurred())
            return -1;
        if (k->alt[j] != NULL) {
            v = PyDict_GetItemWithError(x, k->alt[j]);
            if (v == NULL && PyErr_Occurred())
                return -1;
        }
    }
    if (k->is_cat[j]) {
        /* int, str: T.get(v); float (not NaN), bool: value_code's lookup (a bool under its lookup_key) */
        PyObject *key = v;
        if (v == NULL)
            return 1;
        if (PyBool_Check(v))
            key = v == Py_True ? k->true_key : k->false_key;
        else if (PyFloat_CheckExact(v)) {
            if (isnan(PyFloat_AS_DOUBLE(v)))
                return 1;
        }
        else if (!(PyLong_CheckExact(v) || PyUnicode_CheckExact(v)))
            return 1;
        Py_INCREF(v);  /* the lookup may compare keys (Python code that could drop v from x) */
        PyObject *c = PyDict_GetItemWithError(k->lookup[j], key);
        Py_DECREF(v);
        if (c == NULL)
            return PyErr_Occurred() ? -1 : 1;  /* undeclared: unknown, the Python path */
        if (!PyLong_CheckExact(c))
            return 1;
        long code = PyLong_AsLong(c);
        if (code == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 1;
        }
        *d = (double)code;
        *o = c;
        return 0;
    }
    if (v == NULL || v == Py_None) {  /* missing number: the midpoint */
        *d = k->mid[j];
        *o = k->mid_o[j];
        return 0;
    }
    double f;
    if (PyFloat_CheckExact(v)) {
        f = PyFloat_AS_DOUBLE(v);
    }
    else if (PyLong_CheckExact(v)) {
        int overflow;
        long long i = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || i > (1LL << 53) || i < -(1LL << 53))
            return 1;  /* not exact as a double: Python compares it exactly */
        if (i == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 1;
        }
        f = (double)i;
    }
    else {
        return 1;
    }
    /* mid if v != v else lo if v < lo else hi if v > hi else v */
    if (f != f) {
        *d = k->mid[j];
        *o = k->mid_o[j];
    }
    else if (f < k->lo[j]) {
        *d = k->lo[j];
        *o = k->lo_o[j];
    }
    else if (f > k->hi[j]) {
        *d = k->hi[j];
        *o = k->hi_o[j];
    }
    else {
        *d = f;
        *o = v;
    }
    return 0;
}

static void
free_trees(Kernel *k)
{
    PyMem_Free(k->feat); PyMem_Free(k->thr); PyMem_Free(k->nxt); PyMem_Free(k->root); PyMem_Free(k->leaf);
    PyMem_Free(k->paths);
    k->feat = NULL; k->thr = NULL; k->nxt = NULL; k->root = NULL; k->leaf = NULL; k->paths = NULL;
    k->n_paths = k->H = 0;
    k->T = k->n_nodes = 0;
}

static void
free_rows(Kernel *k)
{
    PyMem_Free(k->rows); PyMem_Free(k->prior); PyMem_Free(k->pooled); PyMem_Free(k->p); PyMem_Free(k->q);
    PyMem_Free(k->yv);
    k->rows = k->prior = k->pooled = k->p = k->q = k->yv = NULL;
    k->n_yv = 0;
    Py_CLEAR(k->prior_list);
    k->mode = 0;
    k->n_rows = k->W = k->C = 0;
}

static int
Kernel_traverse(Kernel *k, visitproc visit, void *arg)
{
    for (Py_ssize_t j = 0; j < k->m; j++) {
        Py_VISIT(k->name ? k->name[j] : NULL);
        Py_VISIT(k->alt ? k->alt[j] : NULL);
        Py_VISIT(k->lookup ? k->lookup[j] : NULL);
        Py_VISIT(k->lo_o ? k->lo_o[j] : NULL);
        Py_VISIT(k->hi_o ? k->hi_o[j] : NULL);
        Py_VISIT(k->mid_o ? k->mid_o[j] : NULL);
    }
    Py_VISIT(k->fallback);
    Py_VISIT(k->false_key);
    Py_VISIT(k->true_key);
    Py_VISIT(k->prior_list);
    return 0;
}

static int
Kernel_clear(Kernel *k)
{
    for (Py_ssize_t j = 0; j < k->m; j++) {
        if (k->name) Py_CLEAR(k->name[j]);
        if (k->alt) Py_CLEAR(k->alt[j]);
        if (k->lookup) Py_CLEAR(k->lookup[j]);
        if (k->lo_o) Py_CLEAR(k->lo_o[j]);
        if (k->hi_o) Py_CLEAR(k->hi_o[j]);
        if (k->mid_o) Py_CLEAR(k->mid_o[j]);
    }
    Py_CLEAR(k->fallback);
    Py_CLEAR(k->false_key);
    Py_CLEAR(k->true_key);
    Py_CLEAR(k->prior_list);
    return 0;
}

static void
Kernel_dealloc(Kernel *k)
{
    PyObject_GC_UnTrack(k);
    Kernel_clear(k);
    PyMem_Free(k->name); PyMem_Free(k->alt); PyMem_Free(k->lookup);
    PyMem_Free(k->lo_o); PyMem_Free(k->hi_o); PyMem_Free(k->mid_o);
    PyMem_Free(k->lo); PyMem_Free(k->hi); PyMem_Free(k->mid); PyMem_Free(k->is_cat);
    PyMem_Free(k->arity); PyMem_Free(k->a);
    free_trees(k);
    free_rows(k);
    Py_TYPE(k)->tp_free((PyObject *)k);
}

/* Kernel(spec, fallback, false_key, true_key): spec a list of (name, alt, lookup, lo, hi, mid) as
 * RecordEncoder._spec, with numeric bounds that are floats or ints exact as doubles (the caller checks);
 * fallback(x) the Python encoder; the booleans' lookup keys (streamdp.records.coding.lookup_key).
 * Atomic: the spec is read from a snapshot tuple (a bound's __float__ may change the list) into local arrays
 * that the kernel takes only when every attribute was read; a failed __init__ leaves a kernel whose methods
 * raise RuntimeError. */
typedef struct {
    Py_ssize_t m;
    PyObject **name, **alt, **lookup, **lo_o, **hi_o, **mid_o;
    double *lo, *hi, *mid, *a;
    char *is_cat;
    Py_ssize_t *arity;
} Attrs;

static void
free_attrs(Attrs *s)
{
    for (Py_ssize_t j = 0; j < s->m; j++) {
        if (s->name) Py_XDECREF(s->name[j]);
        if (s->alt) Py_XDECREF(s->alt[j]);
        if (s->lookup) Py_XDECREF(s->lookup[j]);
        if (s->lo_o) Py_XDECREF(s->lo_o[j]);
        if (s->hi_o) Py_XDECREF(s->hi_o[j]);
        if (s->mid_o) Py_XDECREF(s->mid_o[j]);
    }
    PyMem_Free(s->name); PyMem_Free(s->alt); PyMem_Free(s->lookup);
    PyMem_Free(s->lo_o); PyMem_Free(s->hi_o); PyMem_Free(s->mid_o);
    PyMem_Free(s->lo); PyMem_Free(s->hi); PyMem_Free(s->mid); PyMem_Free(s->a);
    PyMem_Free(s->is_cat); PyMem_Free(s->arity);
}

static int
read_attrs(PyObject *spec, Attrs *s)
{
    Py_ssize_t m = PyTuple_GET_SIZE(spec);
    s->m = m;
    s->name = PyMem_Calloc(m + 1, sizeof(PyObject *));
    s->alt = PyMem_Calloc(m + 1, sizeof(PyObject *));
    s->lookup = PyMem_Calloc(m + 1, sizeof(PyObject *));
    s->lo_o = PyMem_Calloc(m + 1, sizeof(PyObject *));
    s->hi_o = PyMem_Calloc(m + 1, sizeof(PyObject *));
    s->mid_o = PyMem_Calloc(m + 1, sizeof(PyObject *));
    s->lo = PyMem_Calloc(m + 1, sizeof(double));
    s->hi = PyMem_Calloc(m + 1, sizeof(double));
    s->mid = PyMem_Calloc(m + 1, sizeof(double));
    s->a = PyMem_Calloc(m + 1, sizeof(double));
    s->is_cat = PyMem_Calloc(m + 1, 1);
    s->arity = PyMem_Calloc(m + 1, sizeof(Py_ssize_t));
    if (!s->name || !s->alt || !s->lookup || !s->lo_o || !s->hi_o || !s->mid_o || !s->lo || !s->hi || !s->mid
        || !s->a || !s->is_cat || !s->arity) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t j = 0; j < m; j++) {
        PyObject *t = PyTuple_GET_ITEM(spec, j);  /* held by the snapshot; a tuple's items cannot change */
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 6)
            return PyErr_SetString(PyExc_TypeError, "spec: (name, alt, lookup, lo, hi, mid) per attribute"), -1;
        PyObject *name = PyTuple_GET_ITEM(t, 0), *alt = PyTuple_GET_ITEM(t, 1), *lookup = PyTuple_GET_ITEM(t, 2);
        Py_INCREF(name);
        s->name[j] = name;
        if (alt != Py_None) {
            Py_INCREF(alt);
            s->alt[j] = alt;
        }
        if (lookup != Py_None) {
            if (!PyDict_CheckExact(lookup))
                return PyErr_SetString(PyExc_TypeError, "spec: a lookup must be a dict"), -1;
            Py_INCREF(lookup);
            s->lookup[j] = lookup;
            s->is_cat[j] = 1;
            continue;
        }
        PyObject *b[3] = {PyTuple_GET_ITEM(t, 3), PyTuple_GET_ITEM(t, 4), PyTuple_GET_ITEM(t, 5)};
        double *bd[3] = {&s->lo[j], &s->hi[j], &s->mid[j]};
        PyObject **bo[3] = {&s->lo_o[j], &s->hi_o[j], &s->mid_o[j]};
        for (int i = 0; i < 3; i++) {
            double v = PyFloat_AsDouble(b[i]);  /* may run Python code: only locals and the snapshot are used */
            if (v == -1.0 && PyErr_Occurred())
                return -1;
            *bd[i] = v;
            Py_INCREF(b[i]);
            *bo[i] = b[i];
        }
    }
    return 0;
}

static int
Kernel_init(Kernel *k, PyObject *args, PyObject *kwds)
{
    PyObject *lst, *fallback, *false_key, *true_key;
    if (k->ready || k->busy)
        return PyErr_SetString(PyExc_RuntimeError, "Kernel initialised twice"), -1;
    if (!PyArg_ParseTuple(args, "O!OOO:Kernel", &PyList_Type, &lst, &fallback, &false_key, &true_key))
        return -1;
    PyObject *spec = PyList_AsTuple(lst);
    if (spec == NULL)
        return -1;
    Attrs s = {0};
    k->busy = 1;  /* a nested __init__ from a bound's __float__ is refused; other methods see "not initialised" */
    int r = read_attrs(spec, &s);
    k->busy = 0;
    Py_DECREF(spec);
    if (r < 0) {
        free_attrs(&s);
        return -1;
    }
    k->m = s.m;
    k->name = s.name; k->alt = s.alt; k->lookup = s.lookup;
    k->lo_o = s.lo_o; k->hi_o = s.hi_o; k->mid_o = s.mid_o;
    k->lo = s.lo; k->hi = s.hi; k->mid = s.mid; k->a = s.a;
    k->is_cat = s.is_cat; k->arity = s.arity;
    Py_INCREF(fallback);
    k->fallback = fallback;
    Py_INCREF(false_key);
    k->false_key = false_key;
    Py_INCREF(true_key);
    k->true_key = true_key;
    k->ready = 1;
    return 0;
}

static int
get_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, Py_ssize_t n, const char *what)
{
    Py_ssize_t want;
    if (mul_size(itemsize, n, &want, what) < 0)
        return -1;
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0)
        return -1;
    if (view->len != want) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, expected %zd", what, view->len, want);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* set_trees(feat int32[n], thr float64[n], nxt int64[n], root int64[T], arity int64[m]): the random trees'
 * nodes, concatenated; checked so that routing stays inside the arrays. */
static PyObject *
set_trees_impl(Kernel *k, PyObject *args)
{
    PyObject *of, *ot, *on, *orr, *oa;
    Py_ssize_t n, T;
    if (!PyArg_ParseTuple(args, "nnOOOOO:set_trees", &n, &T, &of, &ot, &on, &orr, &oa))
        return NULL;
    if (n < 1 || T < 1)
        return PyErr_Format(PyExc_ValueError, "no nodes");
    Py_buffer bf, bt, bn, br, ba;
    if (get_buffer(of, &bf, 4, n, "feat") < 0)
        return NULL;
    if (get_buffer(ot, &bt, 8, n, "thr") < 0)
        return PyBuffer_Release(&bf), NULL;
    if (get_buffer(on, &bn, 8, n, "nxt") < 0)
        return PyBuffer_Release(&bf), PyBuffer_Release(&bt), NULL;
    if (get_buffer(orr, &br, 8, T, "root") < 0)
        return PyBuffer_Release(&bf), PyBuffer_Release(&bt), PyBuffer_Release(&bn), NULL;
    if (get_buffer(oa, &ba, 8, k->m, "arity") < 0)
        return PyBuffer_Release(&bf), PyBuffer_Release(&bt), PyBuffer_Release(&bn), PyBuffer_Release(&br), NULL;
    free_trees(k);
    k->mode = 0;  /* rows belong to a structure: set again */
    k->feat = PyMem_Malloc(4 * n);
    k->thr = PyMem_Malloc(8 * n);
    k->nxt = PyMem_Malloc(sizeof(Py_ssize_t) * n);
    k->root = PyMem_Malloc(sizeof(Py_ssize_t) * T);
    k->leaf = PyMem_Malloc(sizeof(Py_ssize_t) * T);
    int ok = k->feat && k->thr && k->nxt && k->root && k->leaf;
    if (ok) {
        memcpy(k->feat, bf.buf, 4 * n);
        memcpy(k->thr, bt.buf, 8 * n);
        const long long *nx = bn.buf, *rt = br.buf, *ar = ba.buf;
        for (Py_ssize_t i = 0; i < n; i++)
            k->nxt[i] = (Py_ssize_t)nx[i];
        for (Py_ssize_t t = 0; t < T; t++)
            k->root[t] = (Py_ssize_t)rt[t];
        for (Py_ssize_t j = 0; j < k->m; j++)
            k->arity[j] = (Py_ssize_t)ar[j];
    }
    PyBuffer_Release(&bf); PyBuffer_Release(&bt); PyBuffer_Release(&bn); PyBuffer_Release(&br); PyBuffer_Release(&ba);
    if (!ok) {
        free_trees(k);
        return PyErr_NoMemory();
    }
    k->n_nodes = n;
    k->T = T;
    for (Py_ssize_t t = 0; t < T; t++)
        if (k->root[t] < 0 || k->root[t] >= n)
            goto bad;
    for (Py_ssize_t i = 0; i < n; i++) {
        int f = k->feat[i];
        if (f < 0)
            continue;
        if (f >= k->m)
            goto bad;
        Py_ssize_t kids = k->is_cat[f] ? k->arity[f] : 2;
        if (kids < 1 || k->nxt[i] < 0 || k->nxt[i] + kids > n)
            goto bad;
    }
    Py_RETURN_NONE;
bad:
    free_trees(k);
    PyErr_SetString(PyExc_ValueError, "set_trees: a node points outside the arrays");
    return NULL;
}

/* set_rows(mode, n_rows, W, rows float64[n_rows * W], prior float64[C], r0, v0, kappa, spread) */
static PyObject *
set_rows_impl(Kernel *k, PyObject *args)
{
    int mode;
    Py_ssize_t n_rows, W;
    PyObject *orows, *oprior;
    double r0, v0, kappa, spread;
    if (!PyArg_ParseTuple(args, "innOOdddd:set_rows", &mode, &n_rows, &W, &orows, &oprior, &r0, &v0, &kappa, &spread))
        return NULL;
    if (k->T < 1)
        return PyErr_Format(PyExc_ValueError, "set_rows before set_trees");
    if ((mode != 1 && mode != 2) || n_rows < 1 || W < 1)
        return PyErr_Format(PyExc_ValueError, "set_rows: bad mode or shape");
    Py_buffer bp;
    if (PyObject_GetBuffer(oprior, &bp, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t C = bp.len / 8;
    if (C < 1 || bp.len != 8 * C || (mode == 2 && W != C) || (mode == 1 && W % (C + 1) != 0)) {
        PyBuffer_Release(&bp);
        return PyErr_Format(PyExc_ValueError, "set_rows: the row width does not fit the classes");
    }
    Py_buffer br;
    Py_ssize_t n_cells;
    if (mul_size(n_rows, W, &n_cells, "rows") < 0 || get_buffer(orows, &br, 8, n_cells, "rows") < 0) {
        PyBuffer_Release(&bp);
        return NULL;
    }
    free_rows(k);
    k->rows = PyMem_Malloc(8 * n_cells);  /* 8 * n_cells: the bytes of a buffer that exists */
    k->prior = PyMem_Malloc(8 * C);
    k->pooled = PyMem_Malloc(8 * W);
    k->p = PyMem_Malloc(8 * C);
    k->q = PyMem_Malloc(8 * C);
    int ok = k->rows && k->prior && k->pooled && k->p && k->q;
    if (ok) {
        memcpy(k->rows, br.buf, 8 * n_cells);
        memcpy(k->prior, bp.buf, 8 * C);
    }
    PyBuffer_Release(&br);
    PyBuffer_Release(&bp);
    if (!ok) {
        free_rows(k);
        return PyErr_NoMemory();
    }
    k->prior_list = PyList_New(C);
    if (k->prior_list == NULL) {
        free_rows(k);
        return NULL;
    }
    for (Py_ssize_t c = 0; c < C; c++) {
        PyObject *v = PyFloat_FromDouble(k->prior[c]);
        if (v == NULL) {
            free_rows(k);
            return NULL;
        }
        PyList_SET_ITEM(k->prior_list, c, v);
    }
    for (Py_ssize_t i = 0; i < k->n_nodes; i++)  /* every leaf has a row */
        if (k->feat[i] < 0 && (k->nxt[i] < 0 || k->nxt[i] >= n_rows)) {
            free_rows(k);
            return PyErr_Format(PyExc_ValueError, "set_rows: a leaf has no row");
        }
    k->n_rows = n_rows;
    k->W = W;
    k->C = C;
    k->r0 = r0;
    k->v0 = v0;
    k->kappa = kappa;
    k->spread = spread;
    k->mode = mode;
    Py_RETURN_NONE;
}

/* set_paths(n_rows, H, paths int64[n_rows * H]): per flat leaf, the nodes of its path at depths 1..H
 * (ForestNodes.path_nodes without the root; the leaf again past a shallower leaf, the zero row below a root
 * that is a leaf); per structure. */
static PyObject *
set_paths_impl(Kernel *k, PyObject *args)
{
    Py_ssize_t n_rows, H;
    PyObject *opaths;
    if (!PyArg_ParseTuple(args, "nnO:set_paths", &n_rows, &H, &opaths))
        return NULL;
    if (k->T < 1 || n_rows < 1 || H < 1)
        return PyErr_Format(PyExc_ValueError, "set_paths: before set_trees, or no paths");
    Py_buffer b;
    Py_ssize_t n_cells;
    if (mul_size(n_rows, H, &n_cells, "paths") < 0 || get_buffer(opaths, &b, 8, n_cells, "paths") < 0)
        return NULL;
    free_rows(k);  /* the release's node values follow (set_nodes) */
    PyMem_Free(k->paths);
    k->paths = PyMem_Malloc(sizeof(Py_ssize_t) * n_cells);
    if (k->paths == NULL) {
        PyBuffer_Release(&b);
        k->n_paths = k->H = 0;
        return PyErr_NoMemory();
    }
    const long long *src = b.buf;
    for (Py_ssize_t i = 0; i < n_cells; i++)
        k->paths[i] = (Py_ssize_t)src[i];
    PyBuffer_Release(&b);
    k->n_paths = n_rows;
    k->H = H;
    for (Py_ssize_t i = 0; i < k->n_nodes; i++)  /* every leaf has a path */
        if (k->feat[i] < 0 && (k->nxt[i] < 0 || k->nxt[i] >= n_rows)) {
            PyMem_Free(k->paths);
            k->paths = NULL;
            k->n_paths = k->H = 0;
            return PyErr_Format(PyExc_ValueError, "set_paths: a leaf has no path");
        }
    Py_RETURN_NONE;
}

/* set_nodes(n_nodes, yv float64[n_nodes * (C + 1)], prior float64[C], r0, v0, kappa, spread): per node (ForestNodes'
 * numbering; the last row zeros), its counts then its total's variance, as ForestNodes.path_rows reads them. */
static PyObject *
set_nodes_impl(Kernel *k, PyObject *args)
{
    Py_ssize_t n_yv;
    PyObject *oyv, *oprior;
    double r0, v0, kappa, spread;
    if (!PyArg_ParseTuple(args, "nOOdddd:set_nodes", &n_yv, &oyv, &oprior, &r0, &v0, &kappa, &spread))
        return NULL;
    if (k->paths == NULL || n_yv < 1)
        return PyErr_Format(PyExc_ValueError, "set_nodes: before set_paths, or no nodes");
    Py_buffer bp, by;
    if (PyObject_GetBuffer(oprior, &bp, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t C = bp.len / 8;
    if (C < 1 || bp.len != 8 * C) {
        PyBuffer_Release(&bp);
        return PyErr_Format(PyExc_ValueError, "set_nodes: no classes");
    }
    Py_ssize_t n_cells, W;
    if (mul_size(n_yv, C + 1, &n_cells, "yv") < 0 || mul_size(k->H, C + 1, &W, "yv") < 0
        || mul_size(W, 8, &W, "yv") < 0 || get_buffer(oyv, &by, 8, n_cells, "yv") < 0) {
        PyBuffer_Release(&bp);
        return NULL;
    }
    W /= 8;
    for (Py_ssize_t i = 0; i < k->n_paths * k->H; i++)
        if (k->paths[i] < 0 || k->paths[i] >= n_yv) {
            PyBuffer_Release(&bp);
            PyBuffer_Release(&by);
            return PyErr_Format(PyExc_ValueError, "set_nodes: a path's node is not in the table");
        }
    free_rows(k);
    k->yv = PyMem_Malloc(8 * n_cells);
    k->prior = PyMem_Malloc(8 * C);
    k->pooled = PyMem_Malloc(8 * W);
    k->p = PyMem_Malloc(8 * C);
    k->q = PyMem_Malloc(8 * C);
    int ok = k->yv && k->prior && k->pooled && k->p && k->q;
    if (ok) {
        memcpy(k->yv, by.buf, 8 * n_cells);
        memcpy(k->prior, bp.buf, 8 * C);
    }
    PyBuffer_Release(&by);
    PyBuffer_Release(&bp);
    if (!ok) {
        free_rows(k);
        return PyErr_NoMemory();
    }
    k->n_yv = n_yv;
    k->W = W;
    k->C = C;
    k->r0 = r0;
    k->v0 = v0;
    k->kappa = kappa;
    k->spread = spread;
    k->mode = 3;
    Py_RETURN_NONE;
}

static PyObject *
clear_rows_impl(Kernel *k, PyObject *unused)
{
    free_rows(k);
    Py_RETURN_NONE;
}

/* The methods that change the kernel run under enter(): RuntimeError when called back from Python code the
 * kernel runs (a record key's __eq__ during proba, say), which would free the arrays it is reading. */
#define GUARDED(name)                                      \
    static PyObject *                                      \
    Kernel_##name(Kernel *k, PyObject *args)               \
    {                                                      \
        if (enter(k) < 0)                                  \
            return NULL;                                   \
        PyObject *r = name##_impl(k, args);                \
        k->busy = 0;                                       \
        return r;                                          \
    }
GUARDED(set_trees)
GUARDED(set_rows)
GUARDED(set_paths)
GUARDED(set_nodes)
GUARDED(clear_rows)

/* encode(x): the record's encoded list; a record this code does not handle, or a call back into the kernel
 * from Python code it ran (a key's __eq__), is encoded by the Python encoder. */
static PyObject *
Kernel_encode(Kernel *k, PyObject *x)
{
    if (!k->ready)
        return PyErr_Format(PyExc_RuntimeError, "Kernel is not initialised (its __init__ failed or was not called)");
    if (!PyDict_CheckExact(x) || k->busy)
        return PyObject_CallOneArg(k->fallback, x);
    PyObject *out = PyList_New(k->m);
    if (out == NULL)
        return NULL;
    k->busy = 1;
    for (Py_ssize_t j = 0; j < k->m; j++) {
        double d;
        PyObject *o;
        int r = enc_value(k, x, j, &d, &o);
        if (r != 0) {
            k->busy = 0;
            Py_DECREF(out);
            return r < 0 ? NULL : PyObject_CallOneArg(k->fallback, x);
        }
        Py_INCREF(o);
        PyList_SET_ITEM(out, j, o);
    }
    k->busy = 0;
    return out;
}

static PyObject *
floats(const double *v, Py_ssize_t n)
{
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *f = PyFloat_FromDouble(v[i]);
        if (f == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, f);
    }
    return out;
}

/* The class probabilities of record x into *out (k->p, or k->q under the leaf rule), or the prior when
 * *out is NULL (the leaf rule with no positive total). 0 done, 1 not for this path (None), -1 error.
 * The caller holds k->busy (enter()): the Python code that encoding may run cannot change the arrays. */
static int
compute(Kernel *k, PyObject *x, const double **out)
{
    if (k->mode == 0 || !PyDict_CheckExact(x))
        return 1;
    double *a = k->a;
    for (Py_ssize_t j = 0; j < k->m; j++) {
        PyObject *o;
        int r = enc_value(k, x, j, &a[j], &o);
        if (r != 0)
            return r;
    }
    /* route: nested tests as the generated route (numeric: right child when v > threshold; categorical: the code's child) */
    const int *feat = k->feat;
    const double *thr = k->thr;
    const Py_ssize_t *nxt = k->nxt;
    for (Py_ssize_t t = 0; t < k->T; t++) {
        Py_ssize_t n = k->root[t];
        int f;
        while ((f = feat[n]) >= 0) {
            double v = a[f];
            if (k->is_cat[f]) {
                if (!(v >= 0 && v < (double)k->arity[f]))
                    return 1;  /* a code past the split's children: the Python path decides */
                n = nxt[n] + (Py_ssize_t)v;
            }
            else {
                n = nxt[n] + (v > thr[n]);
            }
        }
        k->leaf[t] = nxt[n];
    }
    /* the vote: every column summed over the trees in tree order, as sum() over zip(*rows); a row is the
     * leaf's own (modes 1, 2) or gathered from its path's nodes (mode 3: ForestNodes.path_rows' numbers) */
    Py_ssize_t W = k->W, T = k->T, C = k->C;
    double *pooled = k->pooled;
    const double *rows = k->rows;
    if (k->mode == 3) {
        const Py_ssize_t H = k->H, C1 = C + 1;
        const double *yv = k->yv;
        for (Py_ssize_t d = 0; d < H; d++) {
            for (Py_ssize_t c = 0; c < C1; c++) {
                double f = 0.0 + yv[k->paths[k->leaf[0] * H + d] * C1 + c];
                for (Py_ssize_t t = 1; t < T; t++)
                    f += yv[k->paths[k->leaf[t] * H + d] * C1 + c];
                pooled[d * C1 + c] = f;
            }
        }
    }
    else for (Py_ssize_t c = 0; c < W; c++) {
        double f = 0.0 + rows[k->leaf[0] * W + c];
        for (Py_ssize_t t = 1; t < T; t++)
            f += rows[k->leaf[t] * W + c];
        pooled[c] = f;
    }
    if (k->mode == 1 || k->mode == 3) {
        memcpy(k->p, k->prior, 8 * C);
        chain(pooled, W, C, k->r0, k->v0, k->kappa, k->spread, k->p, k->q);
        *out = k->p;
        return 0;
    }
    /* mode 2 (ForestView._from_sums, leaf rule): s / sum(s), or the prior when the total is not positive */
    double tot = py_sum(pooled, C, 1);
    if (!(tot > 0)) {
        *out = NULL;
        return 0;
    }
    for (Py_ssize_t c = 0; c < C; c++)
        k->q[c] = pooled[c] / tot;
    *out = k->q;
    return 0;
}

/* proba and predict called back from Python code the kernel runs answer None: the Python path. */
static int
enter_reader(Kernel *k)
{
    if (!k->ready) {
        PyErr_SetString(PyExc_RuntimeError, "Kernel is not initialised (its __init__ failed or was not called)");
        return -1;
    }
    if (k->busy)
        return 1;
    k->busy = 1;
    return 0;
}

static PyObject *
proba_impl(Kernel *k, PyObject *x)
{
    const double *p;
    int r = compute(k, x, &p);
    if (r < 0)
        return NULL;
    if (r > 0)
        Py_RETURN_NONE;
    return p == NULL ? PyList_GetSlice(k->prior_list, 0, k->C) : floats(p, k->C);
}

static PyObject *
Kernel_proba(Kernel *k, PyObject *x)
{
    int e = enter_reader(k);
    if (e != 0)
        return e < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *out = proba_impl(k, x);
    k->busy = 0;
    return out;
}

/* predict(x): p.index(max(p)) of proba(x) (the first largest), or None. max() keeps the first largest
 * item (it replaces only on a strictly larger one) and index() finds that very position. */
static PyObject *
predict_impl(Kernel *k, PyObject *x)
{
    const double *p;
    int r = compute(k, x, &p);
    if (r < 0)
        return NULL;
    if (r > 0)
        Py_RETURN_NONE;
    if (p == NULL)
        p = k->prior;
    Py_ssize_t best = 0;
    for (Py_ssize_t c = 1; c < k->C; c++)
        if (p[c] > p[best])
            best = c;
    return PyLong_FromSsize_t(best);
}

static PyObject *
Kernel_predict(Kernel *k, PyObject *x)
{
    int e = enter_reader(k);
    if (e != 0)
        return e < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *out = predict_impl(k, x);
    k->busy = 0;
    return out;
}

static int
read_floats(PyObject *seq, double **out, Py_ssize_t *n)
{
    PyObject *fast = PySequence_Tuple(seq);  /* a snapshot: an item's __float__ may change a list */
    if (fast == NULL)
        return -1;
    *n = PySequence_Fast_GET_SIZE(fast);
    *out = PyMem_Malloc(8 * (*n + 1));
    if (*out == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        (*out)[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fast, i));
        if ((*out)[i] == -1.0 && PyErr_Occurred()) {
            Py_DECREF(fast);
            PyMem_Free(*out);
            return -1;
        }
    }
    Py_DECREF(fast);
    return 0;
}

/* chain(pooled, prior, r0, v0, kappa, spread): path_proba_one of a pooled row (tests) */
static PyObject *
mod_chain(PyObject *self, PyObject *args)
{
    PyObject *opooled, *oprior;
    double r0, v0, kappa, spread;
    if (!PyArg_ParseTuple(args, "OOdddd:chain", &opooled, &oprior, &r0, &v0, &kappa, &spread))
        return NULL;
    double *pooled, *p;
    Py_ssize_t W, C;
    if (read_floats(opooled, &pooled, &W) < 0)
        return NULL;
    if (read_floats(oprior, &p, &C) < 0) {
        PyMem_Free(pooled);
        return NULL;
    }
    PyObject *out = NULL;
    double *q = PyMem_Malloc(8 * (C + 1));
    if (q == NULL)
        PyErr_NoMemory();
    else if (C < 1 || W % (C + 1) != 0)
        PyErr_SetString(PyExc_ValueError, "chain: the row width does not fit the classes");
    else {
        chain(pooled, W, C, r0, v0, kappa, spread, p, q);
        out = floats(p, C);
    }
    PyMem_Free(pooled);
    PyMem_Free(p);
    PyMem_Free(q);
    return out;
}

/* py_sum(xs): streamdp.estimation.seq_sum of a list of floats, as mirrored here (tests) */
static PyObject *
mod_py_sum(PyObject *self, PyObject *arg)
{
    double *x;
    Py_ssize_t n;
    if (read_floats(arg, &x, &n) < 0)
        return NULL;
    double s = py_sum(x, n, 1);
    PyMem_Free(x);
    return PyFloat_FromDouble(s);
}

static PyMethodDef Kernel_methods[] = {
    {"set_trees", (PyCFunction)Kernel_set_trees, METH_VARARGS, "set_trees(n, T, feat, thr, nxt, root, arity)"},
    {"set_rows", (PyCFunction)Kernel_set_rows, METH_VARARGS,
     "set_rows(mode, n_rows, W, rows, prior, r0, v0, kappa, spread)"},
    {"set_paths", (PyCFunction)Kernel_set_paths, METH_VARARGS, "set_paths(n_rows, H, paths)"},
    {"set_nodes", (PyCFunction)Kernel_set_nodes, METH_VARARGS, "set_nodes(n_nodes, yv, prior, r0, v0, kappa, spread)"},
    {"clear_rows", (PyCFunction)Kernel_clear_rows, METH_NOARGS, "no rows: proba returns None"},
    {"encode", (PyCFunction)Kernel_encode, METH_O, "encode(x): RecordEncoder.encode_one's list"},
    {"proba", (PyCFunction)Kernel_proba, METH_O, "proba(x): class probabilities, or None (the Python path)"},
    {"predict", (PyCFunction)Kernel_predict, METH_O, "predict(x): index of the first largest of proba(x), or None"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject KernelType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "streamdp.river._kernel.Kernel",
    .tp_basicsize = sizeof(Kernel),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The river loop's one-record path for one schema (see the module source).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Kernel_init,
    .tp_dealloc = (destructor)Kernel_dealloc,
    .tp_traverse = (traverseproc)Kernel_traverse,
    .tp_clear = (inquiry)Kernel_clear,
    .tp_methods = Kernel_methods,
};

static PyMethodDef module_methods[] = {
    {"chain", mod_chain, METH_VARARGS, "chain(pooled, prior, r0, v0, kappa, spread)"},
    {"py_sum", mod_py_sum, METH_O, "py_sum(floats): estimation.seq_sum as mirrored by the kernel"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_kernel", "The river loop's one-record path in C (streamdp.river.kernel).", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__kernel(void)
{
    if (PyType_Ready(&KernelType) < 0)
        return NULL;
    PyObject *mod = PyModule_Create(&moduledef);
    if (mod == NULL)
        return NULL;
    Py_INCREF(&KernelType);
    if (PyModule_AddObject(mod, "Kernel", (PyObject *)&KernelType) < 0) {
        Py_DECREF(&KernelType);
        Py_DECREF(mod);
        return NULL;
    }
    if (PyModule_AddIntConstant(mod, "CHAIN", KERNEL_CHAIN) < 0) {  /* the estimate this build mirrors */
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
