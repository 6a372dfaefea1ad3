//! Network namespaces for the labs `homa incast` and `homa bench throughput --netns` build:
//! running `ip` and `tc`, entering a namespace (and CPUs) on a thread, and removing what
//! was created, also on SIGINT or SIGTERM.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::{Arc, Mutex};

use crate::error::Error;

/// Whether this process runs as root: it may create namespaces and open raw IP sockets
/// (CAP_NET_ADMIN or CAP_NET_RAW alone are not checked; the attempt then tells).
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `ip`, `tc` and friends; the error names the command and what it printed.
pub(crate) fn sh(program: &str, args: &[&str]) -> Result<String, Error> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(Error::io(format!("running {program} (is it installed?)")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::Failed(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Namespace names still to delete, shared with the signal thread.
#[derive(Debug, Clone, Default)]
pub(crate) struct Teardown(Arc<Mutex<Pending>>);

#[derive(Debug, Default)]
struct Pending {
    names: Vec<String>,
    /// Set by [`Teardown::stop`]: the lab is going away under the main thread.
    stopped: bool,
}

impl Teardown {
    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lists namespace `ns` for removal (before it exists: a signal in between must not
    /// leave it behind).
    pub(crate) fn add(&self, ns: String) {
        self.pending().names.push(ns);
    }

    /// Deletes every namespace created so far (their veths, bridge and qdiscs go with
    /// them); safe to call twice.
    pub(crate) fn run(&self) {
        let names = std::mem::take(&mut self.pending().names);
        for ns in names.iter().rev() {
            let _ = sh("ip", &["netns", "delete", ns]);
        }
    }

    /// [`Teardown::run`] on a signal: whatever fails in the main thread from now on fails
    /// because the lab went away, see [`Teardown::stopped`].
    pub(crate) fn stop(&self) {
        self.pending().stopped = true;
        self.run();
    }

    /// Whether [`Teardown::stop`] has begun.
    pub(crate) fn stopped(&self) -> bool {
        self.pending().stopped
    }

    /// Removes the namespaces on SIGINT or SIGTERM, then exits as `command` stopped by it.
    /// Call it before any other thread starts: threads started later leave the signals to
    /// the one this starts.
    pub(crate) fn on_signals(&self, command: &'static str) {
        let signals = crate::server::Signals::block();
        let teardown = self.clone();
        std::thread::spawn(move || {
            let signal = signals.wait();
            teardown.stop();
            eprintln!("{command}: stopped by {signal}; namespaces removed");
            std::process::exit(130);
        });
    }

    /// Forgets the namespaces (for `--keep`): they outlive the command.
    pub(crate) fn keep(&self) -> Vec<String> {
        std::mem::take(&mut self.pending().names)
    }
}

/// The CPUs this thread may run on.
pub(crate) fn cpus_allowed() -> Result<Vec<usize>, Error> {
    // SAFETY: a zeroed cpu_set_t is an empty set; the kernel fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a live set of the size given.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        return Err(Error::io("reading the CPU affinity")(std::io::Error::last_os_error()));
    }
    // SAFETY: reads a set the kernel filled.
    Ok((0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect())
}

/// Runs this thread, and the threads and processes it starts from now on, on `cpus` (none:
/// left as it is).
pub(crate) fn pin(cpus: &[usize]) -> Result<(), Error> {
    if cpus.is_empty() {
        return Ok(());
    }
    // SAFETY: a zeroed cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: c < CPU_SETSIZE: it came from cpus_allowed.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: a live set of the size given.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if rc != 0 {
        return Err(Error::io("setting the CPU affinity")(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Runs `f` on a thread inside network namespace `ns`, on `cpus` (none: any): sockets it
/// opens, and threads and processes it starts, live there.
pub(crate) fn run_in<T: Send>(
    ns: &str,
    cpus: &[usize],
    f: impl FnOnce() -> Result<T, Error> + Send,
) -> Result<T, Error> {
    let file = File::open(format!("/run/netns/{ns}"))
        .map_err(Error::io(format!("opening namespace {ns}")))?;
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: a valid namespace fd; setns changes only this thread's namespace.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(Error::io(format!("entering namespace {ns}"))(
                    std::io::Error::last_os_error(),
                ));
            }
            pin(cpus)?;
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(Error::Failed(format!("a thread in {ns} panicked"))))
    })
}
