//! Mapped input that shrinks while it is read: without this, the kernel answers a read past the
//! new end of the file with SIGBUS, which kills the process with no message.
//!
//! A region of memory (a mapped input file) is registered for as long as it is read. A SIGBUS
//! inside a registered region maps zero pages over the rest of the region, so that the read goes
//! on, and marks the region: its reader checks the mark after each piece of work and reports the
//! file as changed while read, instead of using what the zeros made. A SIGBUS anywhere else goes
//! to the handler that was there before (or kills the process, as it would have).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Regions read at once; a build reads one input at a time, so a few are plenty.
const SLOTS: usize = 16;

struct Slot {
    start: AtomicUsize,
    end: AtomicUsize,
    hit: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)] // only to build the array below
const EMPTY: Slot = Slot {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    hit: AtomicBool::new(false),
};

static REGIONS: [Slot; SLOTS] = [EMPTY; SLOTS];

/// A registered region; unregistered when dropped.
pub struct Guard {
    slot: usize,
}

impl Guard {
    /// Registers `len` bytes at `start`; None when every slot is taken or the platform has no
    /// guard (the region is then read unguarded, as before).
    pub fn new(start: *const u8, len: usize) -> Option<Guard> {
        if len == 0 || !install() {
            return None;
        }
        let (start, end) = (start as usize, start as usize + len);
        for (i, slot) in REGIONS.iter().enumerate() {
            // `end` is published before `start`, which marks the slot as in use.
            if slot.start.load(Ordering::Acquire) == 0 && slot.end.load(Ordering::Acquire) == 0 {
                if slot
                    .end
                    .compare_exchange(0, end, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    continue;
                }
                slot.hit.store(false, Ordering::Release);
                slot.start.store(start, Ordering::Release);
                return Some(Guard { slot: i });
            }
        }
        None
    }

    /// Whether a read of the region went past the end of its file (see the module's words).
    pub fn hit(&self) -> bool {
        REGIONS[self.slot].hit.load(Ordering::Acquire)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let slot = &REGIONS[self.slot];
        slot.start.store(0, Ordering::Release);
        slot.end.store(0, Ordering::Release);
    }
}

#[cfg(target_os = "linux")]
mod handler {
    use super::{Ordering, REGIONS};
    use std::mem::MaybeUninit;
    use std::sync::Once;

    static INSTALL: Once = Once::new();
    static mut PREVIOUS: MaybeUninit<libc::sigaction> = MaybeUninit::uninit();
    static mut INSTALLED: bool = false;

    pub fn install() -> bool {
        INSTALL.call_once(|| unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigbus as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            let previous = &raw mut PREVIOUS;
            INSTALLED = libc::sigaction(libc::SIGBUS, &action, (*previous).as_mut_ptr()) == 0;
        });
        unsafe { INSTALLED }
    }

    extern "C" fn on_sigbus(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
        // Only async-signal-safe work here: atomics, mmap and sigaction.
        let addr = unsafe { (*info).si_addr() } as usize;
        for slot in REGIONS.iter() {
            let start = slot.start.load(Ordering::Acquire);
            let end = slot.end.load(Ordering::Acquire);
            if start == 0 || addr < start || addr >= end {
                continue;
            }
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
            let from = addr & !(page - 1);
            let len = (end - from).div_ceil(page) * page;
            let zeros = unsafe {
                libc::mmap(
                    from as *mut libc::c_void,
                    len,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if zeros != libc::MAP_FAILED {
                slot.hit.store(true, Ordering::Release);
                return; // the read is made again, and finds zeros
            }
        }
        // Not ours: the fault comes back at once, to the handler that was there before.
        unsafe {
            let previous = &raw const PREVIOUS;
            libc::sigaction(libc::SIGBUS, (*previous).as_ptr(), std::ptr::null_mut());
        }
    }
}

#[cfg(target_os = "linux")]
use handler::install;

#[cfg(not(target_os = "linux"))]
fn install() -> bool {
    false
}
