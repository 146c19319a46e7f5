//! Handing small jobs from the merging thread to waiting helper threads with less delay than a
//! rayon join.
//!
//! During the merge phase most merges are small (a few words, a few microseconds): splitting
//! them over threads only pays if handing a part over costs much less than that. A rayon join
//! costs about a microsecond here (a job pushed on a deque, stolen, a latch set, a sleeping
//! thread woken); a `Handoff` costs about one cache-line round trip between the two cores: the
//! merging thread stores a pointer to the job, the helper, which spins on that one line, runs
//! it and sets a flag the merging thread spins on.
//!
//! The merging thread never waits for a helper that has not yet taken a job: it takes the job
//! back and runs it itself (the helper may still be busy elsewhere, e.g. starting up).

use std::any::Any;
use std::cell::UnsafeCell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};

/// One helper's mailbox. Aligned so that two mailboxes never share a cache line.
#[repr(align(128))]
#[derive(Default)]
pub struct Handoff {
    /// The job posted and not yet taken; null when there is none.
    slot: AtomicPtr<Job>,
}

/// A job: the closure to run, and what the helper reports back.
struct Job {
    run: UnsafeCell<Option<Box<dyn FnOnce() + Send>>>,
    finished: AtomicBool,
    panic: UnsafeCell<Option<Box<dyn Any + Send>>>,
}

/// Polls of the mailbox between two looks for rayon work.
const POLLS_PER_RAYON_LOOK: u32 = 64;
/// Looks for rayon work that find none before the core is given away once (`sched_yield`,
/// every 10-30 µs of waiting): spinning threads then do not starve the working ones when there
/// are more threads than free cores, and a job posted is still taken within a fraction of a
/// microsecond.
///
/// With three threads or more, a helper looking for rayon work may take another helper's
/// `serve` before that one starts; it then serves that mailbox only, and the parts posted to its
/// own are taken back and run by the merging thread: the same results, less parallel. (Serving
/// both, through a thread-local list of mailboxes, made merges on two threads 3% slower.)
const IDLE_LOOKS_PER_YIELD: u32 = 16;

impl Handoff {
    /// Runs the jobs posted to this mailbox until `stop` is set. Between polls it also runs
    /// rayon work of the current pool (the merge phase's occasional parallel iterators), and
    /// lets other threads have the core when there is none.
    pub fn serve(&self, stop: &AtomicBool) {
        let mut idle_looks = 0u32;
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..POLLS_PER_RAYON_LOOK {
                if self.run_posted() {
                    idle_looks = 0;
                    break;
                }
                std::hint::spin_loop();
            }
            if rayon::yield_now() == Some(rayon::Yield::Executed) {
                idle_looks = 0;
            } else {
                idle_looks += 1;
                if idle_looks % IDLE_LOOKS_PER_YIELD == 0 {
                    std::thread::yield_now();
                }
            }
        }
    }

    /// Runs the posted job, if any; whether there was one.
    fn run_posted(&self) -> bool {
        let job = self.slot.load(Ordering::Acquire);
        if job.is_null() || self.slot.compare_exchange(job, null_mut(), Ordering::Acquire, Ordering::Relaxed).is_err() {
            return false;
        }
        // SAFETY: the job was taken out of the slot by this thread alone (the exchange above),
        // so nothing else touches `run` and `panic`; the poster keeps it alive until `finished`
        // is set (see `Posted::drop`).
        let job = unsafe { &*job };
        let run = unsafe { (*job.run.get()).take() };
        if let Some(run) = run {
            if let Err(payload) = catch_unwind(AssertUnwindSafe(run)) {
                unsafe { *job.panic.get() = Some(payload) };
            }
        }
        job.finished.store(true, Ordering::Release);
        true
    }

    /// Posts `run` to this mailbox; the returned guard waits for it (or runs it, if no helper
    /// took it yet) when dropped, so `run` may borrow from the caller's stack.
    fn post<'a>(&'a self, run: impl FnOnce() + Send + 'a) -> Posted<'a> {
        let run: Box<dyn FnOnce() + Send + 'a> = Box::new(run);
        // SAFETY: only the lifetime is erased. The closure is run or dropped before the guard's
        // `drop` returns (it waits for `finished`), so it never outlives the borrows it holds.
        let run: Box<dyn FnOnce() + Send + 'static> = unsafe { std::mem::transmute(run) };
        let job = Box::into_raw(Box::new(Job { run: UnsafeCell::new(Some(run)), finished: AtomicBool::new(false), panic: UnsafeCell::new(None) }));
        debug_assert!(self.slot.load(Ordering::Relaxed).is_null(), "one job at a time per mailbox");
        self.slot.store(job, Ordering::Release);
        Posted { mailbox: self, job }
    }
}

/// A posted job; dropping it waits until the job has run (see `Handoff::post`).
struct Posted<'a> {
    mailbox: &'a Handoff,
    job: *mut Job,
}

impl Drop for Posted<'_> {
    fn drop(&mut self) {
        let unwinding = std::thread::panicking();
        // Not taken yet: take it back and run it here (or only drop it, when unwinding).
        if self.mailbox.slot.compare_exchange(self.job, null_mut(), Ordering::Acquire, Ordering::Relaxed).is_ok() {
            // SAFETY: back out of the slot, the job is this thread's alone again.
            let job = unsafe { Box::from_raw(self.job) };
            let run = job.run.into_inner();
            if !unwinding {
                if let Some(run) = run {
                    run();
                }
            }
            return;
        }
        // SAFETY: a helper took the job; it sets `finished` last and touches nothing after.
        let job = unsafe { &*self.job };
        spin_until(|| job.finished.load(Ordering::Acquire));
        // SAFETY: finished: the helper is done with the job, which is freed here.
        let job = unsafe { Box::from_raw(self.job) };
        if let Some(payload) = job.panic.into_inner() {
            if !unwinding {
                resume_unwind(payload);
            }
        }
    }
}

/// Runs `work` on each of `items`: the first on this thread, the others at the same time on
/// the helpers behind `mailboxes` (one each; with fewer mailboxes than items, the rest run here
/// too). Returns when all are done.
pub fn run_parts<T: Send>(mailboxes: &[Handoff], items: Vec<T>, work: &(impl Fn(T) + Sync)) {
    let mut items = items.into_iter();
    let Some(mine) = items.next() else { return };
    let posted: Vec<Posted> = mailboxes.iter().zip(items.by_ref()).map(|(mailbox, item)| mailbox.post(move || work(item))).collect();
    work(mine);
    items.for_each(work);
    drop(posted);
}

/// The time, in nanoseconds, for a flag to go from this thread to another and back (the best of
/// a few tries of `rounds` round trips): what handing over a part of a merge costs at least. On
/// a virtual machine it depends on where the host runs the two virtual cores (tens of
/// nanoseconds on one physical core, hundreds between sockets); benchmarks print it.
pub fn round_trip_ns(rounds: u32) -> f64 {
    let flag = AtomicU32::new(0);
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        flag.store(0, Ordering::SeqCst);
        let started = std::thread::scope(|s| {
            s.spawn(|| {
                for k in 0..rounds {
                    spin_until(|| flag.load(Ordering::Acquire) == 2 * k + 1);
                    flag.store(2 * k + 2, Ordering::Release);
                }
            });
            let started = std::time::Instant::now();
            for k in 0..rounds {
                flag.store(2 * k + 1, Ordering::Release);
                spin_until(|| flag.load(Ordering::Acquire) == 2 * k + 2);
            }
            started.elapsed()
        });
        best = best.min(started.as_nanos() as f64 / rounds.max(1) as f64);
    }
    best
}

/// Spins until `done`, giving the core away now and then: the thread it waits for may have been
/// preempted, and with fewer free cores than threads it needs the core to go on.
fn spin_until(done: impl Fn() -> bool) {
    let mut spins = 0u32;
    while !done() {
        spins = spins.wrapping_add(1);
        if spins % 4096 == 0 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn every_part_runs_once_with_or_without_a_serving_helper() {
        let mailboxes: Vec<Handoff> = (0..2).map(|_| Handoff::default()).collect();
        let stop = AtomicBool::new(false);
        let sums: Vec<AtomicUsize> = (0..4).map(|_| AtomicUsize::new(0)).collect();
        std::thread::scope(|s| {
            // One helper serves the first mailbox; nobody serves the second: its parts are
            // taken back and run by the caller.
            s.spawn(|| mailboxes[0].serve(&stop));
            for round in 0..2000 {
                let mut data = [0usize; 4];
                let items: Vec<(usize, &mut usize)> = data.iter_mut().enumerate().collect();
                run_parts(&mailboxes, items, &|(i, slot): (usize, &mut usize)| {
                    *slot = i * round;
                    sums[i].fetch_add(1, Ordering::Relaxed);
                });
                assert_eq!(data, [0, round, 2 * round, 3 * round]);
            }
            stop.store(true, Ordering::Relaxed);
        });
        assert!(sums.iter().all(|s| s.load(Ordering::Relaxed) == 2000));
    }

    #[test]
    fn a_round_trip_takes_some_time() {
        let ns = round_trip_ns(200);
        assert!(ns.is_finite() && ns > 0.0, "{ns}");
    }

    #[test]
    fn a_panic_in_a_helper_reaches_the_caller() {
        let mailbox = [Handoff::default()];
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| mailbox[0].serve(&stop));
            let mut caught = 0;
            for _ in 0..200 {
                let r = catch_unwind(AssertUnwindSafe(|| {
                    run_parts(&mailbox, vec![0, 1], &|i: i32| {
                        if i == 1 {
                            panic!("part 1 fails");
                        }
                    })
                }));
                caught += r.is_err() as usize;
            }
            stop.store(true, Ordering::Relaxed);
            assert_eq!(caught, 200);
        });
    }
}
