//! Result lists of token ids, built from Python ints made once per process.
//!
//! A list of ids holds a reference to one int object per token. Made fresh, each costs an
//! allocation; taken from a table made once (as before this module), each costs a reference
//! count increment, a write to the int object. For o200k the table's ints fill 6 MB, so that
//! write is a cache miss: 13% of the time to encode English, measured with `perf`.
//!
//! So the ints here are immortal: a list holds them without incrementing their count.
//! - CPython 3.12 and later have immortal objects (PEP 683): a count whose low 32 bits read
//!   negative is never changed again. A new int's count is set to that mark.
//! - 3.10 and 3.11 count down when a list that holds an int is freed: the count gets 2^60
//!   added, which no run of decrements brings to zero (small ints too: theirs is shared).
//!
//! The ints are never freed: one table for the process, shared by every model (the int for 7
//! is the same for all), grown to the largest vocabulary seen, 32 bytes per id (6.4 MB for
//! o200k). A free-threaded build or another interpreter lays out objects differently: there
//! every list gets fresh ints.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyList;
use std::sync::atomic::{AtomicPtr, Ordering};
use pyo3::sync::GILOnceCell;

/// How this interpreter's ints are made immortal, if they can be.
#[derive(Clone, Copy, PartialEq)]
enum Immortality {
    /// CPython 3.12 and later: set the low 32 bits of the count to 3 << 30 (its own value).
    Marked,
    /// CPython 3.10 and 3.11: add 2^60 to the count.
    Counted,
    /// Free-threaded builds, other interpreters: lists get fresh ints.
    Unsupported,
}

fn immortality(py: Python<'_>) -> Immortality {
    // A GILOnceCell, not a OnceLock: the check imports modules, which lets another thread take
    // the GIL; with a OnceLock that thread would wait for the cell holding the GIL, and the
    // first thread for the GIL: a deadlock on the first encode of several threads at once.
    // Racing threads here may each run the check (same answer); the first result is kept.
    static MODE: GILOnceCell<Immortality> = GILOnceCell::new();
    *MODE.get_or_init(py, || {
        let check = || -> PyResult<Immortality> {
            let cpython = py.import("sys")?.getattr("implementation")?.getattr("name")?.extract::<String>()? == "cpython";
            let free_threaded = py.import("sysconfig")?.call_method1("get_config_var", ("Py_GIL_DISABLED",))?.is_truthy()?;
            Ok(match (cpython && !free_threaded, py.version_info() >= (3, 12)) {
                (false, _) => Immortality::Unsupported,
                (true, true) => Immortality::Marked,
                (true, false) => Immortality::Counted,
            })
        };
        check().unwrap_or(Immortality::Unsupported)
    })
}

/// Makes `int` immortal. SAFETY: `int` is a live object and this CPython keeps an object's
/// count in its first word (`mode` is not `Unsupported`).
unsafe fn make_immortal(int: *mut ffi::PyObject, mode: Immortality) {
    let count = int as *mut isize;
    match mode {
        // An int that is immortal already (a small int) keeps its count, and its flags.
        Immortality::Marked if (*count as i32) >= 0 => *count = (*count & !0xFFFF_FFFF) | 0xC000_0000,
        Immortality::Counted => *count += 1 << 60,
        _ => {}
    }
}

/// The ints 0..len as object addresses; replaced by a longer table when a larger vocabulary
/// needs one. A replaced table is leaked, not freed: another thread may still be reading it
/// (tables grow by at least half, so all the leaked ones together are smaller than the last).
static TABLE: AtomicPtr<Vec<usize>> = AtomicPtr::new(std::ptr::null_mut());

/// The table of immortal ints, covering at least `0..n`.
fn table(py: Python<'_>, n: usize, mode: Immortality) -> &'static [usize] {
    let current = TABLE.load(Ordering::Acquire);
    // SAFETY: a table, once published, is never freed or changed.
    let old: &'static [usize] = if current.is_null() { &[] } else { unsafe { &*current } };
    if old.len() >= n {
        return old;
    }
    let len = n.max(old.len() + old.len() / 2);
    let mut grown = Vec::with_capacity(len);
    grown.extend_from_slice(old);
    for i in old.len()..len {
        let int = (i as u64).into_pyobject(py).expect("an int").into_ptr();
        // SAFETY: `int` is live, and kept: `into_ptr` gave up no reference.
        unsafe { make_immortal(int, mode) };
        grown.push(int as usize);
    }
    let new = Box::into_raw(Box::new(grown));
    // Every caller holds the GIL, so no other thread grows the table meanwhile; the exchange
    // only guards that assumption. On a lost race the other table is used and ours leaked.
    match TABLE.compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire) {
        // SAFETY: `new` was just leaked from a Box and is never freed; so was `winner`.
        Ok(_) => unsafe { &*new },
        Err(winner) => unsafe { if (*winner).len() >= n { &*winner } else { &*new } },
    }
}

/// The immortal ints of ids `0..len`, readable without the GIL: threads that encode can turn
/// ids into the objects a list holds, so that the thread with the GIL only copies them.
#[derive(Clone, Copy)]
pub struct Ints(&'static [usize]);

/// The table covers at most this many ids (64 MB): ids past it (a special token far past the
/// vocabulary) get fresh ints, as on interpreters without immortal objects.
const MAX_TABLE_IDS: usize = 1 << 21;

impl Ints {
    /// The ints of at least `0..n` (up to `MAX_TABLE_IDS`); None where this interpreter cannot
    /// make them immortal.
    pub fn get(py: Python<'_>, n: usize) -> Option<Ints> {
        match immortality(py) {
            Immortality::Unsupported => None,
            mode => Some(Ints(table(py, n.min(MAX_TABLE_IDS), mode))),
        }
    }

    /// Appends the objects of `ids` to `out`; false if an id is past the table (then `out` may
    /// hold some of them: the caller falls back to `id_list`).
    pub fn objects_of(&self, ids: &[u32], out: &mut Vec<usize>) -> bool {
        out.reserve(ids.len());
        for &id in ids {
            match self.0.get(id as usize) {
                Some(&int) => out.push(int),
                None => return false,
            }
        }
        true
    }
}

/// A new list of the ints `ids`.
pub fn id_list<'py>(py: Python<'py>, ids: &[u32], vocab_len: usize) -> PyResult<Bound<'py, PyList>> {
    let Some(ints) = Ints::get(py, vocab_len) else {
        return PyList::new(py, ids);
    };
    // SAFETY: PyList_New gives a list of `ids.len()` empty slots (or NULL with an exception
    // set); each slot is filled exactly once with an object that lives forever, so the list
    // owns a valid reference in each without an increment (see the module's note).
    unsafe {
        let list = ffi::PyList_New(ids.len() as ffi::Py_ssize_t);
        let list = Bound::from_owned_ptr_or_err(py, list)?.downcast_into_unchecked::<PyList>();
        for (k, &id) in ids.iter().enumerate() {
            let int = match ints.0.get(id as usize) {
                Some(&int) => int as *mut ffi::PyObject,
                None => (id as u64).into_pyobject(py).expect("an int").into_ptr(),
            };
            ffi::PyList_SET_ITEM(list.as_ptr(), k as ffi::Py_ssize_t, int);
        }
        Ok(list)
    }
}

/// A new list of `objects`, given by [`Ints::objects_of`]: one copy of the addresses.
pub fn list_of<'py>(py: Python<'py>, objects: &[usize]) -> PyResult<Bound<'py, PyList>> {
    // SAFETY: as in `id_list`: the list's `objects.len()` slots are all filled, each with an
    // immortal int (`Ints` holds nothing else).
    unsafe {
        let list = ffi::PyList_New(objects.len() as ffi::Py_ssize_t);
        let list = Bound::from_owned_ptr_or_err(py, list)?.downcast_into_unchecked::<PyList>();
        if !objects.is_empty() {
            let items = (*list.as_ptr().cast::<ffi::PyListObject>()).ob_item;
            std::ptr::copy_nonoverlapping(objects.as_ptr().cast::<*mut ffi::PyObject>(), items, objects.len());
        }
        Ok(list)
    }
}
