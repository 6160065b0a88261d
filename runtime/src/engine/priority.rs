//! Keeping the control loop on time while the learner computes on the same cores.
//!
//! Two things made the actor late with the learner on (docs/performance.md): the
//! actor's tensor operations went to the same rayon pool as the learner's, and waited
//! behind them in its queue; and the learner's threads ran at the actor's priority, so
//! on a 2-core machine the scheduler gave the actor a share instead of precedence. So
//! the actor computes on its own one-thread pool (batch-1 inference is faster on one
//! thread anyway), and the learner on a pool whose threads run at a lower priority.

/// Nice levels the learner's threads run below the rest of the process.
pub const LEARNER_NICENESS: i32 = 10;

/// A one-thread rayon pool for the actor's tensor math: operations run inside it
/// (`pool.install`) never wait behind the learner's in another pool's queue.
pub fn actor_pool() -> anyhow::Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .thread_name(|_| "imago-actor".into())
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the actor's compute thread: {e}"))
}

/// A rayon pool for the learner, one thread per core, each running
/// [`LEARNER_NICENESS`] nice levels below normal, so that the actor (at normal
/// priority) runs first whenever both want a core.
pub fn learner_pool() -> anyhow::Result<rayon::ThreadPool> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("imago-learner-{i}"))
        .start_handler(|_| {
            lower_thread_priority(LEARNER_NICENESS);
        })
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the learner's compute threads: {e}"))
}

/// The calling thread's id, the `who` of the priority calls: Linux keeps a nice value
/// per thread.
#[cfg(target_os = "linux")]
fn this_thread() -> libc::id_t {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as libc::id_t }
}

/// The calling thread's nice value; `None` elsewhere than on Linux or if the system
/// does not say.
pub fn thread_nice() -> Option<i32> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: getpriority only reads this thread's scheduling attributes, and
        // errno is this thread's (-1 is also a valid nice value: errno tells them apart).
        unsafe {
            *libc::__errno_location() = 0;
            let nice = libc::getpriority(libc::PRIO_PROCESS, this_thread());
            (nice != -1 || *libc::__errno_location() == 0).then_some(nice)
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// Lowers the calling thread's scheduling priority by `increment` nice levels (never
/// above 19) and returns its new nice value. Only this thread is affected, and
/// lowering needs no privilege. Elsewhere than on Linux, and if the system refuses,
/// nothing changes and `None` is returned.
pub fn lower_thread_priority(increment: i32) -> Option<i32> {
    let wanted = (thread_nice()? + increment).min(19);
    #[cfg(target_os = "linux")]
    {
        // SAFETY: setpriority changes only this thread's nice value.
        let set = unsafe { libc::setpriority(libc::PRIO_PROCESS, this_thread(), wanted) };
        (set == 0).then_some(wanted)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = wanted;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_actor_pool_has_one_thread_and_the_learner_pool_runs_lower() {
        let actor = actor_pool().unwrap();
        assert_eq!(actor.install(rayon::current_num_threads), 1);
        let learner = learner_pool().unwrap();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(learner.install(rayon::current_num_threads), cores);
        let here = thread_nice();
        #[cfg(target_os = "linux")]
        assert!(here.is_some(), "Linux reports a thread's nice value");
        // A learner worker runs LEARNER_NICENESS levels lower (capped at 19); the
        // actor's worker and this thread keep their priority.
        let lowered = here.map(|n| (n + LEARNER_NICENESS).min(19));
        assert_eq!(learner.install(thread_nice), lowered);
        assert_eq!(actor.install(thread_nice), here);
        assert_eq!(thread_nice(), here);
    }
}
