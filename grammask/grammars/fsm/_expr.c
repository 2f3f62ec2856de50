/* Expression nodes of grammask's fsm backend in C: the same contract as the pure-Python
 * ``Expr`` class and ``_make`` in expr.py (read their docstrings first). Building a node is most of
 * the cost of lowering a schema and of a derivative: a concatenation (most nodes), and a union a
 * derivative builds, have their facts computed here; other kinds ask expr.py's ``_node_facts``,
 * so their rules live in one place. Derivatives are taken here too (``derivative``), with
 * expr.py's constructors building intersections, complements and counts.
 *
 * ``setup`` hands over the interning table (a dict, ``expr._INTERN``), the thread-local build
 * context (``expr._ACTIVE``: ``deriving`` and ``budget``) and the Python helpers. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#define BYTES_KIND 2
#define CAT_KIND 3
#define ALT_KIND 4
#define AND_KIND 5
#define NOT_KIND 6
#define STAR_KIND 7
#define CALL_KIND 8
#define COUNT_KIND 9
#define MIN_SWEEP (1 << 16)

typedef struct {
    PyObject_HEAD
    int kind;
    PyObject *args;
    PyObject *bounds;
    Py_hash_t hash;          /* expr.Expr._hash: the sort key, and hash() but for -1 (see expr_hash) */
    PyObject *hash_object; /* the same, as read from Python (one int, not one per read) */
    PyObject *nullable, *min_length, *plain, *has_calls, *single_bytes, *byte_sets;
    PyObject *derivatives, *call_derivatives, *classes, *first_calls, *first, *bound;
    PyObject *settled, *parts_tried, *length_memo, *productive;
    PyObject *weakreflist;
} Expr;

static PyTypeObject ExprType;

/* What setup() hands over (owned references). */
static PyObject *intern_table, *active, *node_facts, *joined_sets, *to_string, *infinite_length;
static long long infinite_value;
static Py_ssize_t sweep_at = MIN_SWEEP;
static PyObject *str_deriving, *str_budget, *str_spend, *zero;
static PyObject *EMPTY_NODE, *EPS_NODE, *ANY_NODE, *cat_kind, *alt_kind, *bytes_kind;

/* ------------------------------------------------------------------ the type */

static int expr_traverse(Expr *self, visitproc visit, void *arg) {
    Py_VISIT(self->args);
    Py_VISIT(self->bounds);
    Py_VISIT(self->hash_object);
    Py_VISIT(self->nullable);
    Py_VISIT(self->min_length);
    Py_VISIT(self->plain);
    Py_VISIT(self->has_calls);
    Py_VISIT(self->single_bytes);
    Py_VISIT(self->byte_sets);
    Py_VISIT(self->derivatives);
    Py_VISIT(self->call_derivatives);
    Py_VISIT(self->classes);
    Py_VISIT(self->first_calls);
    Py_VISIT(self->first);
    Py_VISIT(self->bound);
    Py_VISIT(self->settled);
    Py_VISIT(self->parts_tried);
    Py_VISIT(self->length_memo);
    Py_VISIT(self->productive);
    return 0;
}

static int expr_clear(Expr *self) {
    Py_CLEAR(self->args);
    Py_CLEAR(self->bounds);
    Py_CLEAR(self->hash_object);
    Py_CLEAR(self->nullable);
    Py_CLEAR(self->min_length);
    Py_CLEAR(self->plain);
    Py_CLEAR(self->has_calls);
    Py_CLEAR(self->single_bytes);
    Py_CLEAR(self->byte_sets);
    Py_CLEAR(self->derivatives);
    Py_CLEAR(self->call_derivatives);
    Py_CLEAR(self->classes);
    Py_CLEAR(self->first_calls);
    Py_CLEAR(self->first);
    Py_CLEAR(self->bound);
    Py_CLEAR(self->settled);
    Py_CLEAR(self->parts_tried);
    Py_CLEAR(self->length_memo);
    Py_CLEAR(self->productive);
    return 0;
}

static void expr_dealloc(Expr *self) {
    PyObject_GC_UnTrack(self);
    if (self->weakreflist) PyObject_ClearWeakRefs((PyObject *)self);
    expr_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_hash_t expr_hash(Expr *self) { return self->hash == -1 ? -2 : self->hash; /* -1 means an error */ }

static PyObject *expr_repr(Expr *self) {
    if (!to_string) return PyUnicode_FromString("<expression>");
    return PyObject_CallOneArg(to_string, (PyObject *)self);
}

static PyObject *expr_reduce(PyObject *self, PyObject *unused) {
    PyErr_SetString(PyExc_TypeError, "expressions are process-local; rebuild them from their spec");
    return NULL;
}

static PyMethodDef expr_methods[] = {
    {"__reduce__", expr_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

#define FIELD(name, member, flags) {name, T_OBJECT, offsetof(Expr, member), flags, NULL}
static PyMemberDef expr_members[] = {
    {"kind", T_INT, offsetof(Expr, kind), READONLY, NULL},
    FIELD("args", args, READONLY),
    {"bounds", T_OBJECT, offsetof(Expr, bounds), READONLY,
     "``(lo, hi)`` of a counted node (``hi`` ``None``: unbounded); ``None`` otherwise."},
    FIELD("_hash", hash_object, READONLY),
    FIELD("_nullable", nullable, 0),
    FIELD("_min_length", min_length, 0),
    FIELD("_plain", plain, 0),
    FIELD("_has_calls", has_calls, 0),
    FIELD("_single_bytes", single_bytes, 0),
    FIELD("_byte_sets", byte_sets, 0),
    FIELD("_derivatives", derivatives, 0),
    FIELD("_call_derivatives", call_derivatives, 0),
    FIELD("_classes", classes, 0),
    FIELD("_first_calls", first_calls, 0),
    FIELD("_first", first, 0),
    FIELD("_bound", bound, 0),
    FIELD("_settled", settled, 0),
    FIELD("_parts_tried", parts_tried, 0),
    FIELD("_length_memo", length_memo, 0),
    FIELD("_productive", productive, 0),
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject ExprType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "grammask.grammars.fsm._expr.Expr",
    .tp_doc = "A hash-consed expression node. Build with expr.py's constructors, never directly.",
    .tp_basicsize = sizeof(Expr),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)expr_dealloc,
    .tp_traverse = (traverseproc)expr_traverse,
    .tp_clear = (inquiry)expr_clear,
    .tp_hash = (hashfunc)expr_hash,
    .tp_repr = (reprfunc)expr_repr,
    .tp_weaklistoffset = offsetof(Expr, weakreflist),
    .tp_methods = expr_methods,
    .tp_members = expr_members,
};

/* ------------------------------------------------------------------ facts */

static PyObject *as_bool(int value) { return Py_NewRef(value ? Py_True : Py_False); }

/* ``a | b``, the very object of ``a`` or ``b`` when it is that union (expr._joined_bytes). */
static PyObject *joined_bytes(PyObject *a, PyObject *b) {
    PyObject *joined = PyNumber_Or(a, b);
    if (!joined) return NULL;
    for (int side = 0; side < 2; side++) {
        PyObject *kept = side ? a : b;
        int same = PyObject_RichCompareBool(joined, kept, Py_EQ);
        if (same < 0) {
            Py_DECREF(joined);
            return NULL;
        }
        if (same) {
            Py_DECREF(joined);
            return Py_NewRef(kept);
        }
    }
    return joined;
}

static int is_empty_set(PyObject *sets) { return PyAnySet_Check(sets) && PySet_GET_SIZE(sets) == 0; }

/* The facts of a concatenation, from its two children's (as Expr.__init__ does in Python). */
static int cat_facts(Expr *node, Expr *head, Expr *tail, int deriving) {
    PyObject *hash_key = Py_BuildValue("(inn)", CAT_KIND, head->hash, tail->hash);
    if (!hash_key) return -1;
    node->hash = PyObject_Hash(hash_key);
    Py_DECREF(hash_key);
    if (node->hash == -1 && PyErr_Occurred()) return -1;
    node->nullable = as_bool(head->nullable == Py_True && tail->nullable == Py_True);
    node->plain = as_bool(head->plain == Py_True && tail->plain == Py_True);
    node->has_calls = as_bool(head->has_calls == Py_True || tail->has_calls == Py_True);
    long long a = PyLong_AsLongLong(head->min_length), b = PyLong_AsLongLong(tail->min_length);
    if ((a == -1 || b == -1) && PyErr_Occurred()) return -1;
    if (a >= infinite_value - b) node->min_length = Py_NewRef(infinite_length);
    else if (!(node->min_length = PyLong_FromLongLong(a + b))) return -1;
    PyObject *sets = head->byte_sets, *tail_sets = tail->byte_sets;
    if (deriving || sets == Py_None || tail_sets == Py_None) {
        node->single_bytes = Py_NewRef(zero);
        node->byte_sets = Py_NewRef(Py_None);
        return 0;
    }
    PyObject *single = head->single_bytes, *tail_single = tail->single_bytes;
    int single_set = PyObject_IsTrue(single), tail_single_set = PyObject_IsTrue(tail_single);
    if (single_set < 0 || tail_single_set < 0) return -1;
    if (!single_set) node->single_bytes = Py_NewRef(tail_single);
    else if (!tail_single_set) node->single_bytes = Py_NewRef(single);
    else if (!(node->single_bytes = joined_bytes(single, tail_single))) return -1;
    if (sets == tail_sets || is_empty_set(sets)) node->byte_sets = Py_NewRef(tail_sets);
    else if (is_empty_set(tail_sets)) node->byte_sets = Py_NewRef(sets);
    else if (!(node->byte_sets = PyObject_CallFunctionObjArgs(joined_sets, sets, tail_sets, NULL))) return -1;
    return 0;
}

/* The facts of a union a derivative builds (expr._node_facts, which leaves its byte sets unset):
 * most nodes of a derivative other than concatenations. */
static int derived_union_facts(Expr *node) {
    Py_ssize_t count = PyTuple_GET_SIZE(node->args);
    PyObject *hash_key = PyTuple_New(count + 1);
    if (!hash_key) return -1;
    PyTuple_SET_ITEM(hash_key, 0, Py_NewRef(alt_kind));
    int nullable = 0, plain = 1, has_calls = 0;
    long long shortest = infinite_value;
    for (Py_ssize_t i = 0; i < count; i++) {
        Expr *part = (Expr *)PyTuple_GET_ITEM(node->args, i);
        PyTuple_SET_ITEM(hash_key, i + 1, Py_NewRef(part->hash_object));
        nullable |= part->nullable == Py_True;
        plain &= part->plain == Py_True;
        has_calls |= part->has_calls == Py_True;
        long long length = PyLong_AsLongLong(part->min_length);
        if (length == -1 && PyErr_Occurred()) {
            Py_DECREF(hash_key);
            return -1;
        }
        if (length < shortest) shortest = length;
    }
    node->hash = PyObject_Hash(hash_key);
    Py_DECREF(hash_key);
    if (node->hash == -1 && PyErr_Occurred()) return -1;
    node->nullable = as_bool(nullable);
    node->plain = as_bool(plain);
    node->has_calls = as_bool(has_calls);
    node->min_length = shortest == infinite_value ? Py_NewRef(infinite_length) : PyLong_FromLongLong(shortest);
    if (!node->min_length) return -1;
    node->single_bytes = Py_NewRef(zero);
    node->byte_sets = Py_NewRef(Py_None);
    return 0;
}

/* The facts of another kind, from expr._node_facts: (hash, nullable, min_length, plain,
 * has_calls, single bytes, byte sets). */
static int other_facts(Expr *node, PyObject *kind, PyObject *bounds, int deriving) {
    PyObject *facts = PyObject_CallFunctionObjArgs(node_facts, kind, node->args, bounds, deriving ? Py_True : Py_False, NULL);
    if (!facts) return -1;
    if (!PyTuple_Check(facts) || PyTuple_GET_SIZE(facts) != 7) {
        Py_DECREF(facts);
        PyErr_SetString(PyExc_TypeError, "_node_facts must return a tuple of 7");
        return -1;
    }
    node->hash = PyLong_AsSsize_t(PyTuple_GET_ITEM(facts, 0));
    if (node->hash == -1 && PyErr_Occurred()) {
        Py_DECREF(facts);
        return -1;
    }
    PyObject **fields[] = {&node->nullable, &node->min_length, &node->plain, &node->has_calls, &node->single_bytes, &node->byte_sets};
    for (int i = 0; i < 6; i++) *fields[i] = Py_NewRef(PyTuple_GET_ITEM(facts, i + 1));
    Py_DECREF(facts);
    return 0;
}

static Expr *new_node(int kind, PyObject *kind_object, PyObject *args, PyObject *bounds, int deriving) {
    Expr *node = PyObject_GC_New(Expr, &ExprType);
    if (!node) return NULL;
    node->kind = kind;
    node->args = Py_NewRef(args);
    node->bounds = Py_NewRef(bounds);
    node->hash = 0;
    node->hash_object = NULL;
    node->nullable = node->min_length = node->plain = node->has_calls = node->single_bytes = node->byte_sets = NULL;
    PyObject **lazy[] = {&node->derivatives, &node->call_derivatives, &node->classes, &node->first_calls, &node->first,
                         &node->bound, &node->settled, &node->length_memo, &node->productive};
    for (size_t i = 0; i < sizeof(lazy) / sizeof(lazy[0]); i++) *lazy[i] = Py_NewRef(Py_None);
    node->parts_tried = Py_NewRef(Py_False);
    node->weakreflist = NULL;
    PyObject_GC_Track(node);
    int failed;
    if (kind == CAT_KIND) {
        failed = cat_facts(node, (Expr *)PyTuple_GET_ITEM(args, 0), (Expr *)PyTuple_GET_ITEM(args, 1), deriving);
    } else if (kind == ALT_KIND && deriving) {
        failed = derived_union_facts(node);
    } else {
        failed = other_facts(node, kind_object, bounds, deriving);
    }
    if (failed) {
        Py_DECREF(node);
        return NULL;
    }
    if (!(node->hash_object = PyLong_FromSsize_t(node->hash))) {
        Py_DECREF(node);
        return NULL;
    }
    return node;
}

/* ------------------------------------------------------------------ interning */

/* The node a key's weak reference still points to (a new reference), or NULL (none, or an error
 * set). */
static PyObject *live_entry(PyObject *key) {
    PyObject *ref = PyDict_GetItemWithError(intern_table, key);
    if (!ref) return NULL;
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *node = NULL;
    if (PyWeakref_GetRef(ref, &node) < 0) return NULL;
    return node;
#else
    PyObject *node = PyWeakref_GetObject(ref);
    if (!node) return NULL;
    if (node == Py_None) return NULL;
    return Py_NewRef(node);
#endif
}

/* The interning key: ``(kind, *args)`` for a leaf, ``(kind, id(part), bounds)`` for a count, and
 * otherwise the kind and the children's addresses packed in bytes (a key holds no reference to
 * the children: see expr._INTERN). */
static PyObject *intern_key(int kind, PyObject *kind_object, PyObject *args, PyObject *bounds) {
    Py_ssize_t count = PyTuple_GET_SIZE(args);
    if (kind <= BYTES_KIND) {
        PyObject *key = PyTuple_New(count + 1);
        if (!key) return NULL;
        PyTuple_SET_ITEM(key, 0, Py_NewRef(kind_object));
        for (Py_ssize_t i = 0; i < count; i++) PyTuple_SET_ITEM(key, i + 1, Py_NewRef(PyTuple_GET_ITEM(args, i)));
        return key;
    }
    if (kind == COUNT_KIND) {
        PyObject *address = PyLong_FromVoidPtr(PyTuple_GET_ITEM(args, 0));
        if (!address) return NULL;
        PyObject *key = PyTuple_Pack(3, kind_object, address, bounds);
        Py_DECREF(address);
        return key;
    }
    PyObject *key = PyBytes_FromStringAndSize(NULL, (count + 1) * (Py_ssize_t)sizeof(uintptr_t));
    if (!key) return NULL;
    uintptr_t *words = (uintptr_t *)PyBytes_AS_STRING(key);
    words[0] = (uintptr_t)kind;
    for (Py_ssize_t i = 0; i < count; i++) words[i + 1] = (uintptr_t)PyTuple_GET_ITEM(args, i);
    return key;
}

/* Drop the entries whose node is gone, once the table has doubled since the last sweep. */
static int sweep(void) {
    PyObject *dead = PyList_New(0), *key, *ref;
    if (!dead) return -1;
    Py_ssize_t position = 0;
    while (PyDict_Next(intern_table, &position, &key, &ref)) {
#if PY_VERSION_HEX >= 0x030D0000
        PyObject *node = NULL;
        if (PyWeakref_GetRef(ref, &node) < 0) goto failed;
        if (node) {
            Py_DECREF(node);
            continue;
        }
#else
        PyObject *node = PyWeakref_GetObject(ref);
        if (!node) goto failed;
        if (node != Py_None) continue;
#endif
        if (PyList_Append(dead, key) < 0) goto failed;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(dead); i++) {
        if (PyDict_DelItem(intern_table, PyList_GET_ITEM(dead, i)) < 0) goto failed;
    }
    Py_DECREF(dead);
    Py_ssize_t size = PyDict_GET_SIZE(intern_table);
    sweep_at = 2 * size > MIN_SWEEP ? 2 * size : MIN_SWEEP;
    return 0;
failed:
    Py_DECREF(dead);
    return -1;
}

/* Count one new node against this thread's build budget, if any (BuildBudget.spend may raise). */
static int spend(void) {
    PyObject *budget = PyObject_GetAttr(active, str_budget);
    if (!budget) return -1;
    int failed = 0;
    if (budget != Py_None) {
        PyObject *done = PyObject_CallMethodNoArgs(budget, str_spend);
        failed = done ? 0 : -1;
        Py_XDECREF(done);
    }
    Py_DECREF(budget);
    return failed;
}

/* The interned node of ``kind`` (also as ``kind_object``) over ``args`` (checked by the caller). */
static PyObject *make_node(long kind, PyObject *kind_object, PyObject *args, PyObject *bounds) {
    PyObject *key = intern_key((int)kind, kind_object, args, bounds);
    if (!key) return NULL;
    PyObject *found = live_entry(key);
    if (found || PyErr_Occurred()) {
        Py_DECREF(key);
        return found;
    }
    PyObject *deriving_object = PyObject_GetAttr(active, str_deriving);
    if (!deriving_object) {
        Py_DECREF(key);
        return NULL;
    }
    int deriving = PyObject_IsTrue(deriving_object);
    Py_DECREF(deriving_object);
    if (deriving < 0) {
        Py_DECREF(key);
        return NULL;
    }
    Expr *node = new_node((int)kind, kind_object, args, bounds, deriving);
    if (!node) {
        Py_DECREF(key);
        return NULL;
    }
    /* Building may have run Python code (another kind's facts), and so another thread's build of
     * the same key: the first node interned is the one. */
    found = live_entry(key);
    if (found || PyErr_Occurred()) {
        Py_DECREF(key);
        Py_DECREF(node);
        return found;
    }
    PyObject *ref = PyWeakref_NewRef((PyObject *)node, NULL);
    int failed = !ref || PyDict_SetItem(intern_table, key, ref) < 0;
    Py_XDECREF(ref);
    Py_DECREF(key);
    if (!failed && PyDict_GET_SIZE(intern_table) >= sweep_at) failed = sweep() < 0;
    if (!failed) failed = spend() < 0;
    if (failed) {
        Py_DECREF(node);
        return NULL;
    }
    return (PyObject *)node;
}

static PyObject *make(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    if (argc < 2 || argc > 3) {
        PyErr_SetString(PyExc_TypeError, "make(kind, args, bounds=None)");
        return NULL;
    }
    if (!intern_table) {
        PyErr_SetString(PyExc_RuntimeError, "_expr.setup() was not called");
        return NULL;
    }
    PyObject *kind_object = argv[0], *args = argv[1], *bounds = argc == 3 ? argv[2] : Py_None;
    long kind = PyLong_AsLong(kind_object);
    if (kind == -1 && PyErr_Occurred()) return NULL;
    if (!PyTuple_Check(args)) {
        PyErr_SetString(PyExc_TypeError, "make: args must be a tuple");
        return NULL;
    }
    if (kind > BYTES_KIND && kind != CALL_KIND) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); i++) {
            if (!PyObject_TypeCheck(PyTuple_GET_ITEM(args, i), &ExprType)) {
                PyErr_SetString(PyExc_TypeError, "make: the parts of a node are expressions");
                return NULL;
            }
        }
    }
    if (kind == CAT_KIND && PyTuple_GET_SIZE(args) != 2) {
        PyErr_SetString(PyExc_TypeError, "make: a concatenation has two parts");
        return NULL;
    }
    return make_node(kind, kind_object, args, bounds);
}

/* ------------------------------------------------------------------ constructors */


static PyObject *make_pair(PyObject *kind_object, long kind, PyObject *a, PyObject *b) {
    PyObject *args = PyTuple_Pack(2, a, b);
    if (!args) return NULL;
    PyObject *node = make_node(kind, kind_object, args, Py_None);
    Py_DECREF(args);
    return node;
}

/* ``a`` then ``b``, right-nested (expr._cat2). */
static PyObject *cat2(PyObject *a, PyObject *b) {
    if (a == EMPTY_NODE || b == EMPTY_NODE) return Py_NewRef(EMPTY_NODE);
    if (a == EPS_NODE) return Py_NewRef(b);
    if (b == EPS_NODE) return Py_NewRef(a);
    Py_ssize_t depth = 0;
    for (PyObject *spine = a; ((Expr *)spine)->kind == CAT_KIND; spine = PyTuple_GET_ITEM(((Expr *)spine)->args, 1)) depth++;
    if (!depth) return make_pair(cat_kind, CAT_KIND, a, b);
    PyObject **heads = PyMem_Malloc(depth * sizeof(PyObject *));
    if (!heads) return PyErr_NoMemory();
    PyObject *spine = a;
    for (Py_ssize_t i = 0; i < depth; i++) {
        heads[i] = PyTuple_GET_ITEM(((Expr *)spine)->args, 0);  /* borrowed: a keeps them alive */
        spine = PyTuple_GET_ITEM(((Expr *)spine)->args, 1);
    }
    PyObject *result = make_pair(cat_kind, CAT_KIND, spine, b);
    for (Py_ssize_t i = depth - 1; i >= 0 && result; i--) {
        PyObject *next = make_pair(cat_kind, CAT_KIND, heads[i], result);
        Py_DECREF(result);
        result = next;
    }
    PyMem_Free(heads);
    return result;
}

static int check_parts(PyObject *const *argv, Py_ssize_t argc) {
    if (!EMPTY_NODE) {
        PyErr_SetString(PyExc_RuntimeError, "_expr.set_constants() was not called");
        return -1;
    }
    for (Py_ssize_t i = 0; i < argc; i++) {
        if (!PyObject_TypeCheck(argv[i], &ExprType)) {
            PyErr_Format(PyExc_TypeError, "expected expressions, got %.100s", Py_TYPE(argv[i])->tp_name);
            return -1;
        }
    }
    return 0;
}

static PyObject *cat(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    if (check_parts(argv, argc) < 0) return NULL;
    PyObject *result = Py_NewRef(EPS_NODE);
    for (Py_ssize_t i = argc - 1; i >= 0 && result; i--) {
        PyObject *next = cat2(argv[i], result);
        Py_DECREF(result);
        result = next;
    }
    return result;
}

/* The canonical order of a union's parts (expr._sorted): kind, then hash, then address. */
static int by_kind_hash_address(const void *left, const void *right) {
    const Expr *a = *(Expr *const *)left, *b = *(Expr *const *)right;
    if (a->kind != b->kind) return a->kind < b->kind ? -1 : 1;
    if (a->hash != b->hash) return a->hash < b->hash ? -1 : 1;
    return (uintptr_t)a < (uintptr_t)b ? -1 : (uintptr_t)a > (uintptr_t)b;
}

/* Add ``part`` to a union's parts: ∅ left out, byte sets joined into ``*byte_union``. Returns 1
 * when the part is ¬∅ (the union is everything), -1 on an error. */
static int gather(Expr *part, PyObject **parts, Py_ssize_t *count, PyObject **byte_union) {
    if ((PyObject *)part == EMPTY_NODE) return 0;
    if ((PyObject *)part == ANY_NODE) return 1;
    if (part->kind == BYTES_KIND) {
        PyObject *mask = PyTuple_GET_ITEM(part->args, 0);
        PyObject *joined = *byte_union ? PyNumber_Or(*byte_union, mask) : Py_NewRef(mask);
        Py_XSETREF(*byte_union, joined);
        return joined ? 0 : -1;
    }
    parts[(*count)++] = (PyObject *)part;  /* borrowed: the caller's arguments keep it alive */
    return 0;
}

static PyObject *alt(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    if (check_parts(argv, argc) < 0) return NULL;
    Py_ssize_t room = 1;
    for (Py_ssize_t i = 0; i < argc; i++) {
        Expr *part = (Expr *)argv[i];
        room += part->kind == ALT_KIND ? PyTuple_GET_SIZE(part->args) : 1;
    }
    PyObject **parts = PyMem_Malloc(room * sizeof(PyObject *));
    if (!parts) return PyErr_NoMemory();
    PyObject *byte_union = NULL, *bytes_node = NULL, *result = NULL;
    Py_ssize_t count = 0;
    int found = 0;
    for (Py_ssize_t i = 0; i < argc && !found; i++) {
        Expr *part = (Expr *)argv[i];
        if (part->kind != ALT_KIND) {
            found = gather(part, parts, &count, &byte_union);
            continue;
        }
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(part->args) && !found; j++)
            found = gather((Expr *)PyTuple_GET_ITEM(part->args, j), parts, &count, &byte_union);
    }
    if (found < 0) goto done;
    if (found) {
        result = Py_NewRef(ANY_NODE);
        goto done;
    }
    if (byte_union) {
        int nonzero = PyObject_IsTrue(byte_union);
        if (nonzero < 0) goto done;
        if (nonzero) {
            PyObject *args = PyTuple_Pack(1, byte_union);
            if (!args) goto done;
            bytes_node = make_node(BYTES_KIND, bytes_kind, args, Py_None);
            Py_DECREF(args);
            if (!bytes_node) goto done;
            parts[count++] = bytes_node;
        }
    }
    /* Equal parts are one object: sorted, duplicates are neighbours. */
    qsort(parts, count, sizeof(PyObject *), by_kind_hash_address);
    Py_ssize_t distinct = 0;
    for (Py_ssize_t i = 0; i < count; i++)
        if (!distinct || parts[distinct - 1] != parts[i]) parts[distinct++] = parts[i];
    if (distinct == 0) {
        result = Py_NewRef(EMPTY_NODE);
    } else if (distinct == 1) {
        result = Py_NewRef(parts[0]);
    } else {
        PyObject *args = PyTuple_New(distinct);
        if (args) {
            for (Py_ssize_t i = 0; i < distinct; i++) PyTuple_SET_ITEM(args, i, Py_NewRef(parts[i]));
            result = make_node(ALT_KIND, alt_kind, args, Py_None);
            Py_DECREF(args);
        }
    }
done:
    PyMem_Free(parts);
    Py_XDECREF(bytes_node);
    Py_XDECREF(byte_union);
    return result;
}

/* ------------------------------------------------------------------ derivatives */

/* expr.derivative's contract (expr._derived, kind by kind), with the node's ``_derivatives`` list
 * as its cache, one entry per byte class, as in Python. ``&``, ``¬`` and counts are built by
 * expr.py's constructors (inter, neg, counted), which keep their simplifications in one place.
 * What setup() hands over for them (owned references): */
static PyObject *py_byte_classes, *py_first_bytes, *py_inter, *py_neg, *py_counted, *py_charge_parts, *class_tables;
static Py_ssize_t large_union;
#define MAX_CLASS_TABLES 65536

/* The 256-bit mask ``mask`` (a non-negative int) as 32 little-endian bytes. 0, or -1 on an error. */
static int mask_bytes(PyObject *mask, unsigned char bits[32]) {
#if PY_VERSION_HEX >= 0x030D0000
    Py_ssize_t size = PyLong_AsNativeBytes(mask, bits, 32, Py_ASNATIVEBYTES_LITTLE_ENDIAN | Py_ASNATIVEBYTES_UNSIGNED_BUFFER);
    if (size < 0) return -1;
    if (size > 32) {
        PyErr_SetString(PyExc_OverflowError, "a byte mask has more than 256 bits");
        return -1;
    }
    return 0;
#else
    return _PyLong_AsByteArray((PyLongObject *)mask, bits, 32, 1, 0);
#endif
}

/* Whether bit ``byte`` of the mask ``mask`` is set; -1 on an error. */
static int mask_bit(PyObject *mask, int byte) {
    unsigned char bits[32];
    if (mask_bytes(mask, bits) < 0) return -1;
    return (bits[byte >> 3] >> (byte & 7)) & 1;
}

/* ``[256]`` the index in ``classes`` (a partition: a tuple of masks) of each byte's class, as a
 * borrowed bytes object kept per partition (by identity: the entry holds the tuple). */
static PyObject *class_table(PyObject *classes) {
    PyObject *address = PyLong_FromVoidPtr(classes);
    if (!address) return NULL;
    PyObject *entry = PyDict_GetItemWithError(class_tables, address);
    if (entry) {
        Py_DECREF(address);
        return PyTuple_GET_ITEM(entry, 1);
    }
    PyObject *table = NULL;
    if (PyErr_Occurred() || !(table = PyBytes_FromStringAndSize(NULL, 256))) goto failed;
    unsigned char *index = (unsigned char *)PyBytes_AS_STRING(table);
    memset(index, 0, 256);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(classes) && i < 256; i++) {
        unsigned char bits[32];
        if (mask_bytes(PyTuple_GET_ITEM(classes, i), bits) < 0) goto failed;
        for (int byte = 0; byte < 256; byte++)
            if ((bits[byte >> 3] >> (byte & 7)) & 1) index[byte] = (unsigned char)i;
    }
    if (PyDict_GET_SIZE(class_tables) >= MAX_CLASS_TABLES) PyDict_Clear(class_tables);
    entry = PyTuple_Pack(2, classes, table);
    Py_DECREF(table);
    if (!entry || PyDict_SetItem(class_tables, address, entry) < 0) {
        Py_XDECREF(entry);
        Py_DECREF(address);
        return NULL;
    }
    Py_DECREF(entry);  /* the dict holds it, and so the table */
    Py_DECREF(address);
    return PyTuple_GET_ITEM(entry, 1);
failed:
    Py_XDECREF(table);
    Py_DECREF(address);
    return NULL;
}

/* Call ``helper(e)`` for what it does to ``e`` (sets a fact, charges a budget). 0, or -1 with an error. */
static int call_for_effect(PyObject *helper, Expr *e) {
    PyObject *done = PyObject_CallOneArg(helper, (PyObject *)e);
    Py_XDECREF(done);
    return done ? 0 : -1;
}

/* The slot of ``e``'s derivative by ``byte`` in its cache (made on first use), or -1. */
static Py_ssize_t derivative_slot(Expr *e, int byte) {
    if (e->classes == Py_None && call_for_effect(py_byte_classes, e) < 0) return -1;  /* sets e->classes */
    PyObject *classes = e->classes;
    if (!PyTuple_Check(classes) || !PyTuple_GET_SIZE(classes) || PyTuple_GET_SIZE(classes) > 256) {
        PyErr_SetString(PyExc_TypeError, "an expression's byte classes are a tuple of 1 to 256 masks");
        return -1;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(classes), slot = 0;
    if (count > 1) {
        PyObject *table = class_table(classes);
        if (!table) return -1;
        slot = ((unsigned char *)PyBytes_AS_STRING(table))[byte];
    }
    if (e->derivatives == Py_None) {
        PyObject *known = PyList_New(count);
        if (!known) return -1;
        for (Py_ssize_t i = 0; i < count; i++) PyList_SET_ITEM(known, i, Py_NewRef(Py_None));
        Py_SETREF(e->derivatives, known);
    }
    if (!PyList_Check(e->derivatives) || PyList_GET_SIZE(e->derivatives) != count) {
        PyErr_SetString(PyExc_TypeError, "an expression's derivative cache does not match its byte classes");
        return -1;
    }
    return slot;
}

static PyObject *derive(Expr *e, int byte);

/* ``a ∪ b`` (both owned; consumed). */
static PyObject *union_of_two(PyObject *a, PyObject *b) {
    PyObject *parts[2] = {a, b};
    PyObject *result = alt(NULL, parts, 2);
    Py_DECREF(a);
    Py_DECREF(b);
    return result;
}

/* Whether a derivative of ``part`` by ``byte`` may be other than ∅ (expr.first_bytes). */
static int may_start_with(Expr *part, int byte) {
    if (part->first == Py_None && call_for_effect(py_first_bytes, part) < 0) return -1;  /* sets part->first */
    return mask_bit(part->first, byte);
}

/* The derivative of a union (the parts that may start with ``byte``, united) or of an
 * intersection (every part's, intersected by expr.inter; ∅ when some part cannot start with it). */
static PyObject *derive_parts(Expr *e, int byte) {
    Py_ssize_t count = PyTuple_GET_SIZE(e->args), used = 0;
    if (count >= large_union && call_for_effect(py_charge_parts, e) < 0) return NULL;  /* by part, as in Python */
    if (e->kind == AND_KIND) {
        int starts = may_start_with(e, byte);
        if (starts <= 0) return starts < 0 ? NULL : Py_NewRef(EMPTY_NODE);
    }
    PyObject **parts = PyMem_Malloc((count ? count : 1) * sizeof(PyObject *));
    if (!parts) return PyErr_NoMemory();
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        Expr *part = (Expr *)PyTuple_GET_ITEM(e->args, i);
        int starts = e->kind == AND_KIND ? 1 : may_start_with(part, byte);
        if (starts < 0) goto done;
        if (starts && !(parts[used] = derive(part, byte))) goto done;
        used += starts;
    }
    result = e->kind == AND_KIND ? PyObject_Vectorcall(py_inter, parts, used, NULL) : alt(NULL, parts, used);
done:
    for (Py_ssize_t i = 0; i < used; i++) Py_DECREF(parts[i]);
    PyMem_Free(parts);
    return result;
}

/* A count's part is not nullable: ``byte`` starts a copy, after which one fewer is needed. */
static PyObject *derive_count(Expr *e, int byte) {
    PyObject *part = PyTuple_GET_ITEM(e->args, 0);
    long lo = PyLong_AsLong(PyTuple_GET_ITEM(e->bounds, 0));
    if (lo == -1 && PyErr_Occurred()) return NULL;
    PyObject *hi = PyTuple_GET_ITEM(e->bounds, 1), *fewer_hi;
    if (hi == Py_None) {
        fewer_hi = Py_NewRef(Py_None);
    } else {
        long bound = PyLong_AsLong(hi);
        if (bound == -1 && PyErr_Occurred()) return NULL;
        fewer_hi = PyLong_FromLong(bound - 1);
    }
    PyObject *fewer_lo = PyLong_FromLong(lo > 0 ? lo - 1 : 0);
    PyObject *rest = fewer_lo && fewer_hi ? PyObject_CallFunctionObjArgs(py_counted, part, fewer_lo, fewer_hi, NULL) : NULL;
    Py_XDECREF(fewer_lo);
    Py_XDECREF(fewer_hi);
    if (!rest) return NULL;
    PyObject *head = derive((Expr *)part, byte), *result = NULL;
    if (head) result = cat2(head, rest);
    Py_XDECREF(head);
    Py_DECREF(rest);
    return result;
}

/* expr._derived: the derivative, computed (the caller caches it). */
static PyObject *derived(Expr *e, int byte) {
    PyObject **args = e->kind > BYTES_KIND && e->kind != CALL_KIND ? &PyTuple_GET_ITEM(e->args, 0) : NULL;
    switch (e->kind) {
    case BYTES_KIND: {
        int bit = mask_bit(PyTuple_GET_ITEM(e->args, 0), byte);
        return bit < 0 ? NULL : Py_NewRef(bit ? EPS_NODE : EMPTY_NODE);
    }
    case CAT_KIND: {
        PyObject *head = derive((Expr *)args[0], byte);
        if (!head) return NULL;
        PyObject *result = cat2(head, args[1]);
        Py_DECREF(head);
        if (!result) return NULL;
        int nullable = PyObject_IsTrue(((Expr *)args[0])->nullable);
        if (!nullable) return result;
        PyObject *tail = nullable < 0 ? NULL : derive((Expr *)args[1], byte);
        if (!tail) {
            Py_DECREF(result);
            return NULL;
        }
        return union_of_two(result, tail);
    }
    case ALT_KIND:
    case AND_KIND:
        return derive_parts(e, byte);
    case STAR_KIND: {
        PyObject *part = derive((Expr *)args[0], byte);
        if (!part) return NULL;
        PyObject *result = cat2(part, (PyObject *)e);
        Py_DECREF(part);
        return result;
    }
    case NOT_KIND: {
        PyObject *part = derive((Expr *)args[0], byte);
        if (!part) return NULL;
        PyObject *result = PyObject_CallOneArg(py_neg, part);
        Py_DECREF(part);
        return result;
    }
    case COUNT_KIND:
        return derive_count(e, byte);
    default:  /* ∅, ε, a call */
        return Py_NewRef(EMPTY_NODE);
    }
}

/* The cached derivative of ``e`` by ``byte``, computed on a miss (in the deriving mode, set by
 * the caller). A new reference, or NULL with an error set. */
static PyObject *derive(Expr *e, int byte) {
    Py_ssize_t slot = derivative_slot(e, byte);
    if (slot < 0) return NULL;
    PyObject *cached = PyList_GET_ITEM(e->derivatives, slot);
    if (cached != Py_None) return Py_NewRef(cached);
    if (Py_EnterRecursiveCall(" while deriving an expression")) return NULL;
    PyObject *result = derived(e, byte);
    Py_LeaveRecursiveCall();
    if (result) PyList_SetItem(e->derivatives, slot, Py_NewRef(result));  /* the list is still e's: slots are fixed */
    return result;
}

static PyObject *derivative(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 2) {
        PyErr_SetString(PyExc_TypeError, "derivative(expr, byte)");
        return NULL;
    }
    if (!py_inter) {
        PyErr_SetString(PyExc_RuntimeError, "_expr.setup() was not given the derivatives' helpers");
        return NULL;
    }
    if (check_parts(argv, 1) < 0) return NULL;
    long byte = PyLong_AsLong(argv[1]);
    if (byte == -1 && PyErr_Occurred()) return NULL;
    if (byte < 0 || byte > 255) {
        PyErr_Format(PyExc_ValueError, "a byte is 0 to 255, got %ld", byte);
        return NULL;
    }
    Expr *e = (Expr *)argv[0];
    Py_ssize_t slot = derivative_slot(e, (int)byte);
    if (slot < 0) return NULL;
    PyObject *cached = PyList_GET_ITEM(e->derivatives, slot);
    if (cached != Py_None) return Py_NewRef(cached);
    PyObject *mode = PyObject_GetAttr(active, str_deriving);
    if (!mode) return NULL;
    int outermost = mode == Py_False;
    Py_DECREF(mode);
    if (outermost && PyObject_SetAttr(active, str_deriving, Py_True) < 0) return NULL;
    PyObject *result = derive(e, (int)byte);
    if (outermost) {  /* restored whatever happened, keeping a pending error */
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        int failed = PyObject_SetAttr(active, str_deriving, Py_False) < 0;
        if (failed && !type) {
            Py_XDECREF(result);
            return NULL;
        }
        if (failed) PyErr_Clear();
        PyErr_Restore(type, value, traceback);
    }
    return result;
}

static PyObject *set_constants(PyObject *module, PyObject *args) {
    PyObject *empty, *eps, *any;
    if (!PyArg_ParseTuple(args, "O!O!O!", &ExprType, &empty, &ExprType, &eps, &ExprType, &any)) return NULL;
    Py_XSETREF(EMPTY_NODE, Py_NewRef(empty));
    Py_XSETREF(EPS_NODE, Py_NewRef(eps));
    Py_XSETREF(ANY_NODE, Py_NewRef(any));
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ the length bound */

static long long add_lengths(long long a, long long b) {
    return a >= infinite_value - b ? infinite_value : a + b;
}

static int length_of(PyObject *value, long long *out) {
    long long length = PyLong_AsLongLong(value);
    if (length == -1 && PyErr_Occurred()) return -1;
    *out = length < infinite_value ? length : infinite_value;
    return 0;
}

/* The memoised bound of a node, by address (the nodes live as long as the walk's root). */
static int memo_get(PyObject *memo, Expr *node, long long *out, int *found) {
    PyObject *key = PyLong_FromVoidPtr(node);
    if (!key) return -1;
    PyObject *value = PyDict_GetItemWithError(memo, key);
    Py_DECREF(key);
    *found = value != NULL;
    if (!value) return PyErr_Occurred() ? -1 : 0;
    *out = PyLong_AsLongLong(value);
    return 0;
}

static int memo_set(PyObject *memo, Expr *node, long long length) {
    PyObject *key = PyLong_FromVoidPtr(node), *value = PyLong_FromLongLong(length);
    int status = key && value ? PyDict_SetItem(memo, key, value) : -1;
    Py_XDECREF(key);
    Py_XDECREF(value);
    return status;
}

/* length_bound(body, rule_bound): expr.length_bound's contract (its pure-Python reference). An
 * explicit stack, as there: a long expression nests deeper than C's stack should. */
static PyObject *length_bound(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyObject_TypeCheck(args[0], &ExprType)) {
        PyErr_SetString(PyExc_TypeError, "length_bound(body, rule_bound) takes an expression and a callable");
        return NULL;
    }
    PyObject *rule_bound = args[1], *memo = PyDict_New(), *result = NULL;
    Py_ssize_t size = 0, room = 64;
    Expr **stack = PyMem_Malloc(room * sizeof(Expr *));
    if (!memo || !stack) goto done;
    stack[size++] = (Expr *)args[0];
    while (size) {
        Expr *node = stack[size - 1], *pending = NULL;
        long long length = 0;
        int found;
        if (memo_get(memo, node, &length, &found) < 0) goto done;
        if (found) {
            size--;
            continue;
        }
        if (node->kind == CALL_KIND) {
            PyObject *bound = PyObject_CallOneArg(rule_bound, PyTuple_GET_ITEM(node->args, 0));
            int failed = !bound || length_of(bound, &length) < 0;
            Py_XDECREF(bound);
            if (failed) goto done;
        } else if (node->has_calls != Py_True) {
            if (length_of(node->min_length, &length) < 0) goto done;
        } else if (node->kind == STAR_KIND || node->kind == NOT_KIND) {
            length = 0;  /* a complement with free values may match the empty text */
        } else if (node->kind == CAT_KIND) {
            /* call-free heads down the spine are summed from their facts; only where the run
             * ends is a node visited */
            Expr *rest = node;
            long long head;
            while (rest->kind == CAT_KIND && ((Expr *)PyTuple_GET_ITEM(rest->args, 0))->has_calls != Py_True) {
                if (length_of(((Expr *)PyTuple_GET_ITEM(rest->args, 0))->min_length, &head) < 0) goto done;
                length = add_lengths(length, head);
                rest = (Expr *)PyTuple_GET_ITEM(rest->args, 1);
            }
            if (rest != node) {
                long long tail;
                if (memo_get(memo, rest, &tail, &found) < 0) goto done;
                if (found) length = add_lengths(length, tail);
                else pending = rest;
            } else {
                long long part;
                for (int i = 0; i < 2 && !pending; i++) {
                    Expr *arg = (Expr *)PyTuple_GET_ITEM(node->args, i);
                    if (memo_get(memo, arg, &part, &found) < 0) goto done;
                    if (found) length = add_lengths(length, part);
                    else pending = arg;
                }
            }
        } else {
            Py_ssize_t count = PyTuple_GET_SIZE(node->args);
            long long part;
            length = infinite_value;
            for (Py_ssize_t i = 0; i < count && !pending; i++) {
                Expr *arg = (Expr *)PyTuple_GET_ITEM(node->args, i);
                if (memo_get(memo, arg, &part, &found) < 0) goto done;
                if (!found) pending = arg;
                else if (part < length) length = part;
            }
        }
        if (pending) {
            if (size == room) {
                Expr **grown = PyMem_Realloc(stack, 2 * room * sizeof(Expr *));
                if (!grown) {
                    PyErr_NoMemory();
                    goto done;
                }
                stack = grown;
                room *= 2;
            }
            stack[size++] = pending;
            continue;
        }
        if (memo_set(memo, node, length) < 0) goto done;
        size--;
    }
    long long length = 0;
    int found = 0;
    if (memo_get(memo, (Expr *)args[0], &length, &found) == 0 && found)
        result = length >= infinite_value ? Py_NewRef(infinite_length) : PyLong_FromLongLong(length);
done:
    PyMem_Free(stack);
    Py_XDECREF(memo);
    return result;
}

/* Hand over the Python objects the module works with, by keyword (each call sets those given):
 * first those nodes are built with, then, once expr.py defines them, the derivatives' helpers. */
static PyObject *setup(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"table", "active", "node_facts", "joined_sets", "to_string", "infinite_length", "byte_classes",
                            "first_bytes", "inter", "neg", "counted", "charge_parts", "large_union", NULL};
    PyObject *given[12] = {NULL};
    Py_ssize_t large = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$O!OOOOO!OOOOOOn", names, &PyDict_Type, &given[0], &given[1], &given[2],
                                     &given[3], &given[4], &PyLong_Type, &given[5], &given[6], &given[7], &given[8], &given[9],
                                     &given[10], &given[11], &large))
        return NULL;
    PyObject **slots[12] = {&intern_table, &active, &node_facts, &joined_sets, &to_string, &infinite_length, &py_byte_classes,
                            &py_first_bytes, &py_inter, &py_neg, &py_counted, &py_charge_parts};
    if (given[5]) {
        long long infinite = PyLong_AsLongLong(given[5]);
        if (infinite == -1 && PyErr_Occurred()) return NULL;
        infinite_value = infinite;
    }
    if (!class_tables && !(class_tables = PyDict_New())) return NULL;
    for (int i = 0; i < 12; i++)
        if (given[i]) Py_XSETREF(*slots[i], Py_NewRef(given[i]));
    if (large >= 0) large_union = large;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"make", (PyCFunction)(void (*)(void))make, METH_FASTCALL,
     "make(kind, args, bounds=None): the interned node (expr._make's contract)."},
    {"cat", (PyCFunction)(void (*)(void))cat, METH_FASTCALL, "cat(*parts): expr.cat's contract."},
    {"alt", (PyCFunction)(void (*)(void))alt, METH_FASTCALL, "alt(*parts): expr.alt's contract."},
    {"derivative", (PyCFunction)(void (*)(void))derivative, METH_FASTCALL, "derivative(expr, byte): expr.derivative's contract."},
    {"length_bound", (PyCFunction)(void (*)(void))length_bound, METH_FASTCALL,
     "length_bound(body, rule_bound): expr.length_bound's contract."},
    {"set_constants", set_constants, METH_VARARGS, "set_constants(EMPTY, EPS, ANY)"},
    {"setup", (PyCFunction)(void (*)(void))setup, METH_VARARGS | METH_KEYWORDS,
     "setup(**handles): table, active, node_facts, joined_sets, to_string, infinite_length; byte_classes, "
     "first_bytes, inter, neg, counted, charge_parts, large_union"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_expr", "grammask fsm expression nodes", -1, methods};

PyMODINIT_FUNC PyInit__expr(void) {
    if (PyType_Ready(&ExprType) < 0) return NULL;
    str_deriving = PyUnicode_InternFromString("deriving");
    str_budget = PyUnicode_InternFromString("budget");
    str_spend = PyUnicode_InternFromString("spend");
    zero = PyLong_FromLong(0);
    cat_kind = PyLong_FromLong(CAT_KIND);
    alt_kind = PyLong_FromLong(ALT_KIND);
    bytes_kind = PyLong_FromLong(BYTES_KIND);
    if (!str_deriving || !str_budget || !str_spend || !zero || !cat_kind || !alt_kind || !bytes_kind) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Expr", (PyObject *)&ExprType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
