/* The gate in front of the kernel's witness (nanoparallel/grading/guard.py).

Python runs a signal handler between any two bytecodes of the main thread, and hands it the frame
that was running. Were that the witness's hook, the handler would read the hook's locals and
closure (its key, its records) with no audit event: no Python-level guard can protect its own
frame, and Python offers no way to defer handlers. So the witness's audit hook is this C function.
Before it calls the hook it checks, in C, that every signal's handler is still the one the kernel
had: Python lets only the main thread install a handler, and the main thread is then inside the
hook, so no handler the notebook installed can run while the hook runs. If one is installed, the
gate never calls the hook again: it clears the witness's secrets, drops the hook and writes a line
the grader reads as a finding (autograder/guarded_execute.py, read_records).

While the hook runs, only the witness's own code may reach for frames (sys._getframe, a traceback's
or a generator's frame, trace and profile functions, gc): code the hook runs without meaning to (a
`__del__` as it drops the last reference to a notebook object) would find the hook's frames below
it, so such a reach closes the gate and is refused.

It also lets in only the events the hook reads, collects no cyclic garbage while the hook runs (a
`__del__` there would run unheard above the hook's frames), lets no exception out of the hook
(its traceback would carry the hook's frames), and runs the hook for one thread at a time: an event
from another thread waits, rather than passing unheard while the hook is busy (another thread's
sys._current_frames() would otherwise read the hook's frame, unheard).

Nothing in Python refers to the hook once it is installed: the gate holds it in C. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static PyObject *hook;             /* the witness's hook, held only here */
static PyObject *signal_numbers;   /* tuple of ints */
static PyObject *handlers;         /* tuple: each signal's handler as the kernel had it */
static PyObject *interrupt_allowed;/* tuple: what SIGINT may hold (ipykernel swaps it per request) */
static PyObject *secrets;          /* tuple of dicts cleared if the gate closes */
static PyObject *own_code;         /* frozenset of the addresses of the witness's own code objects */
static PyObject *graveyard;        /* list: what the hook let go of, dropped once it has returned */
static PyObject *getsignal_self;   /* _signal.getsignal, called through its C entry point */
static PyCFunction getsignal_c;
static char **heard;
static Py_ssize_t heard_count;
static const char *resume_event;
static long interrupt_number;
static int records_fd = -1;
static int installed, closed, answered;
static PyThread_type_lock lock;
/* Raised by the locals(), vars() and dir() below before they read the calling frame. */
#define FRAME_LOCALS "nanoparallel.frame_locals"
static unsigned long owner;        /* the thread running the hook; 0 while none does */

/* An event from another thread waits at most this long for the hook (microseconds). Past it the
   gate closes (a notebook could make the hook slow, so that the event would pass unheard); the
   longest look the hook takes on the course's notebooks is about a second. */
#define WAIT_FOR_HOOK_US 60000000LL

static int
is_heard(const char *event)
{
    for (Py_ssize_t i = 0; i < heard_count; i++) {
        if (strncmp(event, heard[i], strlen(heard[i])) == 0)
            return 1;
    }
    return strcmp(event, "object.__getattr__") == 0;
}

static int
is_one_of(PyObject *value, PyObject *options)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(options); i++) {
        if (PyTuple_GET_ITEM(options, i) == value)
            return 1;
    }
    return 0;
}

/* Every signal's handler is the object the kernel had (by identity: comparing with == would run
   the notebook's __eq__). */
static long changed_signal;  /* the first signal found with a handler the kernel did not have */

static int
handlers_unchanged(void)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(signal_numbers); i++) {
        PyObject *number = PyTuple_GET_ITEM(signal_numbers, i);
        PyObject *now = getsignal_c(getsignal_self, number);
        if (now == NULL) {
            PyErr_Clear();
            return 0;
        }
        if (now == Py_None && PyTuple_GET_ITEM(handlers, i) != Py_None) {
            Py_DECREF(now);
            return -1;  /* torn down: Python is finalizing (nothing else sets None) */
        }
        int same = now == PyTuple_GET_ITEM(handlers, i) ||
                   (PyLong_AsLong(number) == interrupt_number && is_one_of(now, interrupt_allowed));
        Py_DECREF(now);
        if (!same) {
            changed_signal = PyLong_AsLong(number);
            return 0;
        }
    }
    return 1;
}

/* Closes the gate for good, saying why on a line of the records of its own. The line is not
   MAC'd: the grader reads any line that starts "the witness closed: " as a finding
   (autograder/guarded_execute.py, read_records); a notebook that writes one only flags itself. */
/* Whether the frame raising the event runs the witness's own code (by identity: code compiled
   from the same text, under the same file name, is another object). */
static int
raised_by_own_code(void)
{
    PyFrameObject *frame = PyEval_GetFrame();
    if (frame == NULL)
        return 1;  /* raised from C with no Python frame: no notebook code */
    PyCodeObject *code = PyFrame_GetCode(frame);
    PyObject *address = PyLong_FromVoidPtr(code);
    Py_DECREF(code);
    int found = address != NULL ? PySet_Contains(own_code, address) : -1;
    Py_XDECREF(address);
    if (found < 0) {
        PyErr_Clear();
        return 0;
    }
    return found;
}

/* The events through which code gets a frame, or everything (gc): */
static int
reaches_frames(const char *event, PyObject *args)
{
    static const char *exact[] = {"sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile", NULL};
    static const char *attributes[] = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", NULL};
    for (int i = 0; exact[i] != NULL; i++) {
        if (strcmp(event, exact[i]) == 0)
            return 1;
    }
    if (strncmp(event, "gc.", 3) == 0)
        return 1;
    if (strcmp(event, "object.__getattr__") != 0 || !PyTuple_Check(args) || PyTuple_GET_SIZE(args) < 2 ||
            !PyUnicode_Check(PyTuple_GET_ITEM(args, 1)))
        return 0;
    for (int i = 0; attributes[i] != NULL; i++) {
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(args, 1), attributes[i]) == 0)
            return 1;
    }
    return 0;
}

/* Closes the gate for good: clears the secrets and drops the hook. With a `line`, writes it into
   the records first (the grader turns it into a finding). Without one, the interpreter is
   shutting down: Python has torn its signal handling down (every handler reads None) and is
   tearing the modules down. No cell runs any more and nothing is left to witness, so the gate
   closes without a word, and closes its end of the records too, so that no __del__ run by the
   teardown can write there. */
static void
close_gate(const char *line)
{
    closed = 1;
    if (records_fd >= 0 && line != NULL) {
        ssize_t written = write(records_fd, line, strlen(line));
        (void)written;  /* nothing to do if the grader's pipe is gone */
    }
    for (Py_ssize_t i = 0; secrets != NULL && i < PyTuple_GET_SIZE(secrets); i++)
        PyDict_Clear(PyTuple_GET_ITEM(secrets, i));
    Py_CLEAR(hook);
    Py_CLEAR(secrets);
    if (line == NULL && records_fd >= 0) {
        close(records_fd);
        records_fd = -1;
    }
}

static int
refuse_hook(void)
{
    PyErr_SetString(PyExc_RuntimeError, "nanoparallel's grader does not allow more audit hooks");
    return -1;
}

static int
gate(const char *event, PyObject *args, void *unused)
{
    (void)unused;
    if (!installed)
        return 0;
    if (strcmp(event, "nanoparallel.gate_installed") == 0) {
        answered = 1;  /* gate_install's check that Python kept the gate */
        return 0;
    }
    int adds_hook = strcmp(event, "sys.addaudithook") == 0;
    if (!closed && _Py_IsFinalizing())
        close_gate(NULL);
    if (closed)
        return adds_hook ? refuse_hook() : 0;
    unsigned long me = PyThread_get_thread_ident();
    if (owner == me) {
        /* What the hook itself does, or code the hook ran without meaning to (a __del__ as it drops
           a reference, a garbage collection's finalizer, a notebook object's method): every frame
           below that code is the hook's, so only the witness's own code may reach for frames
           here, and nothing called from C while the hook's own frame is on top may read that
           frame's locals or run code in it (locals, vars, dir, eval, exec), which the hook never
           does itself. */
        int reads_this_frame = strcmp(event, "exec") == 0 || strcmp(event, FRAME_LOCALS) == 0;
        int reaches = !reads_this_frame && reaches_frames(event, args);
        if ((reaches || reads_this_frame) && raised_by_own_code() == reads_this_frame) {
            close_gate("\nthe witness closed: code it did not write ran inside it and reached for frames\n");
            PyErr_SetString(PyExc_RuntimeError, "code ran inside nanoparallel's witness and reached for frames");
            return -1;
        }
        return 0;
    }
    if (!is_heard(event) || strcmp(event, FRAME_LOCALS) == 0)
        return 0;  /* a read of the calling frame outside the hook is anyone's business */
    if (strcmp(event, resume_event) == 0) {
        /* The profile function's events: only a frame returning is read. */
        if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) < 2 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(args, 1)) ||
                PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(args, 1), "return") != 0)
            return 0;
    }
    if (!PyThread_acquire_lock(lock, NOWAIT_LOCK)) {
        PyLockStatus got;
        Py_BEGIN_ALLOW_THREADS
        got = PyThread_acquire_lock_timed(lock, WAIT_FOR_HOOK_US, 0);
        Py_END_ALLOW_THREADS
        if (got != PY_LOCK_ACQUIRED) {
            close_gate("\nthe witness closed: an event of another thread waited a minute for the hook\n");
            return adds_hook ? refuse_hook() : 0;
        }
    }
    owner = me;
    PyObject *error_type, *error_value, *error_tb;
    PyErr_Fetch(&error_type, &error_value, &error_tb);
    int unchanged = handlers_unchanged();
    if (unchanged < 0) {
        close_gate(NULL);
        owner = 0;
        PyThread_release_lock(lock);
        PyErr_Restore(error_type, error_value, error_tb);
        return adds_hook ? refuse_hook() : 0;
    }
    if (!unchanged) {
        char line[160];
        snprintf(line, sizeof line, "\nthe witness closed: a signal handler the kernel did not install was in place "
                 "(signal %ld)\n", changed_signal);
        close_gate(line);
        owner = 0;
        PyThread_release_lock(lock);
        PyErr_Restore(error_type, error_value, error_tb);
        return adds_hook ? refuse_hook() : 0;
    }
    int was_collecting = PyGC_Disable();
    PyObject *name = PyUnicode_FromString(event);
    PyObject *result = NULL;
    PyObject *running = Py_XNewRef(hook);  /* a thread that waited too long may close the gate meanwhile */
    if (name != NULL && running != NULL)
        result = PyObject_CallFunctionObjArgs(running, name, args, NULL);
    Py_XDECREF(running);
    Py_XDECREF(name);
    if (was_collecting)
        PyGC_Enable();
    owner = 0;
    PyThread_release_lock(lock);
    /* What the hook let go of dies here, with no frame of the hook's below a __del__ it runs. */
    if (graveyard != NULL && PyList_GET_SIZE(graveyard) > 0) {
        PyObject *pending_error_type, *pending_error_value, *pending_error_tb;
        PyErr_Fetch(&pending_error_type, &pending_error_value, &pending_error_tb);
        if (PyList_SetSlice(graveyard, 0, PY_SSIZE_T_MAX, NULL) < 0)
            PyErr_Clear();
        PyErr_Restore(pending_error_type, pending_error_value, pending_error_tb);
    }
    if (result != NULL) {
        Py_DECREF(result);
        PyErr_Restore(error_type, error_value, error_tb);
        return adds_hook ? refuse_hook() : 0;  /* no hook after the witness's, whatever it said */
    }
    /* An exception out of the hook: the hook lets none out but a KeyboardInterrupt (a SIGINT that
       landed in it) and its refusal of another hook. Each is raised afresh, with no traceback. */
    int interrupted = PyErr_ExceptionMatches(PyExc_KeyboardInterrupt);
    PyErr_Clear();
    Py_XDECREF(error_type);
    Py_XDECREF(error_value);
    Py_XDECREF(error_tb);
    if (interrupted) {
        PyErr_SetNone(PyExc_KeyboardInterrupt);
        return -1;
    }
    return adds_hook ? refuse_hook() : 0;
}

PyDoc_STRVAR(gate_install_doc,
"install(hook, heard, resume_event, getsignal, signals, handlers, interrupt, interrupt_allowed,\n"
"        records_fd, secrets, own_code, graveyard)\n"
"\n"
"Put `hook` behind the gate, once per process (see the module's source for what it does).");

static PyObject *
gate_install(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *new_hook, *heard_tuple, *getsignal, *numbers, *before, *allowed, *clear, *codes, *dead;
    const char *resume;
    long interrupt;
    int fd;
    if (!PyArg_ParseTuple(args, "OO!sOO!O!lO!iO!O!O!", &new_hook, &PyTuple_Type, &heard_tuple, &resume, &getsignal,
                          &PyTuple_Type, &numbers, &PyTuple_Type, &before, &interrupt, &PyTuple_Type, &allowed,
                          &fd, &PyTuple_Type, &clear, &PyFrozenSet_Type, &codes, &PyList_Type, &dead))
        return NULL;
    if (installed) {
        PyErr_SetString(PyExc_RuntimeError, "the gate is already installed in this process");
        return NULL;
    }
    if (!PyCFunction_Check(getsignal) || !(PyCFunction_GET_FLAGS(getsignal) & METH_O)) {
        PyErr_SetString(PyExc_TypeError, "getsignal must be _signal.getsignal");
        return NULL;
    }
    if (PyTuple_GET_SIZE(numbers) != PyTuple_GET_SIZE(before)) {
        PyErr_SetString(PyExc_ValueError, "one handler per signal number");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(clear); i++) {
        if (!PyDict_Check(PyTuple_GET_ITEM(clear, i))) {
            PyErr_SetString(PyExc_TypeError, "secrets must be dicts");
            return NULL;
        }
    }
    heard_count = PyTuple_GET_SIZE(heard_tuple);
    heard = PyMem_RawCalloc(heard_count ? heard_count : 1, sizeof(char *));
    char *resume_copy = PyMem_RawMalloc(strlen(resume) + 1);
    lock = PyThread_allocate_lock();
    if (heard == NULL || resume_copy == NULL || lock == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < heard_count; i++) {
        const char *prefix = PyUnicode_AsUTF8(PyTuple_GET_ITEM(heard_tuple, i));
        if (prefix == NULL)
            return NULL;
        heard[i] = PyMem_RawMalloc(strlen(prefix) + 1);
        if (heard[i] == NULL)
            return PyErr_NoMemory();
        strcpy(heard[i], prefix);
    }
    strcpy(resume_copy, resume);
    resume_event = resume_copy;
    getsignal_c = PyCFunction_GET_FUNCTION(getsignal);
    getsignal_self = Py_XNewRef(PyCFunction_GET_SELF(getsignal));
    hook = Py_NewRef(new_hook);
    signal_numbers = Py_NewRef(numbers);
    handlers = Py_NewRef(before);
    interrupt_number = interrupt;
    interrupt_allowed = Py_NewRef(allowed);
    records_fd = fd;
    secrets = Py_NewRef(clear);
    own_code = Py_NewRef(codes);
    graveyard = Py_NewRef(dead);
    installed = 1;
    /* Python drops a new hook silently if a hook already there refuses it with a RuntimeError. */
    if (PySys_AddAuditHook(gate, NULL) < 0 || PySys_Audit("nanoparallel.gate_installed", NULL) < 0)
        return NULL;
    if (!answered) {
        installed = 0;
        PyErr_SetString(PyExc_RuntimeError, "Python refused the grader's audit hook: another hook is installed");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* locals(), vars() and dir() with no argument read the frame that called them, with no audit
   event: called from C as a notebook object's method (a `__str__` that is a partial of
   itertools.starmap(vars, [()]) fed to list.extend) while the hook works on it, that frame is the
   hook's. Their replacements raise FRAME_LOCALS first, then call Python's own; inside the hook only
   the witness's own code may (the gate closes otherwise), and the ranks' guard stops on it. */
static PyObject *original_locals, *original_vars, *original_dir;

static PyObject *
call_original(PyObject *original, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs == 0 && (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0) &&
            PySys_Audit(FRAME_LOCALS, NULL) < 0)
        return NULL;
    return PyObject_Vectorcall(original, args, (size_t)nargs, kwnames);
}

static PyObject *
sealed_locals(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)self;
    return call_original(original_locals, args, nargs, kwnames);
}

static PyObject *
sealed_vars(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)self;
    return call_original(original_vars, args, nargs, kwnames);
}

static PyObject *
sealed_dir(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)self;
    return call_original(original_dir, args, nargs, kwnames);
}

static PyMethodDef frame_readers[] = {
    {"locals", (PyCFunction)(void (*)(void))sealed_locals, METH_FASTCALL | METH_KEYWORDS,
     "locals(): as Python's, announced to the grader's witness first."},
    {"vars", (PyCFunction)(void (*)(void))sealed_vars, METH_FASTCALL | METH_KEYWORDS,
     "vars([object]): as Python's; without an object, announced to the grader's witness first."},
    {"dir", (PyCFunction)(void (*)(void))sealed_dir, METH_FASTCALL | METH_KEYWORDS,
     "dir([object]): as Python's; without an object, announced to the grader's witness first."},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(seal_frame_readers_doc,
"seal_frame_readers()\n"
"\n"
"Put locals(), vars() and dir() that announce a read of the calling frame into builtins, once per\n"
"process; Python's own are held only here.");

static PyObject *
seal_frame_readers(PyObject *module, PyObject *unused)
{
    (void)unused;
    if (original_locals != NULL)
        Py_RETURN_NONE;
    PyObject *builtins = PyEval_GetBuiltins();  /* borrowed */
    PyObject **originals[] = {&original_locals, &original_vars, &original_dir};
    for (int i = 0; i < 3; i++) {
        PyObject *original = PyDict_GetItemString(builtins, frame_readers[i].ml_name);
        PyObject *sealed = PyCFunction_NewEx(&frame_readers[i], NULL, PyModule_GetNameObject(module));
        if (original == NULL || sealed == NULL || PyDict_SetItemString(builtins, frame_readers[i].ml_name, sealed) < 0) {
            Py_XDECREF(sealed);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "builtins has no locals, vars or dir");
            return NULL;
        }
        *originals[i] = Py_NewRef(original);
        Py_DECREF(sealed);
    }
    Py_RETURN_NONE;
}

static PyMethodDef gate_methods[] = {
    {"install", gate_install, METH_VARARGS, gate_install_doc},
    {"seal_frame_readers", seal_frame_readers, METH_NOARGS, seal_frame_readers_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef gate_module = {
    PyModuleDef_HEAD_INIT, "_gate",
    "The C gate in front of the kernel's witness: see nanoparallel/grading/_gate.c.", -1, gate_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__gate(void)
{
    return PyModule_Create(&gate_module);
}
