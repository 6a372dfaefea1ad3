//! Who receives from the transport: the driver thread, a leading thread, an event loop, or
//! (for a grace period after a leader left) nobody. One value says it; every change of it
//! goes through [`Receiver`]'s transitions, which return how the driver thread's epoll set
//! must change ([`Watch`]), so the epoll set follows the state.
//!
//! While an event loop drives, the driver thread still keeps an eye on the transport
//! ([`Stall`]): a loop busy for milliseconds with the application's work (a Python handler, a
//! long synchronous JavaScript function) must not leave Homa's peers unanswered.

use std::thread::ThreadId;

use homa_core::time::Nanos;

/// A thread that leads: it receives from the transport itself while it waits, so the
/// packet it waits for wakes it directly (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Lead {
    /// It receives now (it waits, or is about to send what it will wait for); before, it
    /// has only claimed leadership.
    pub(crate) started: bool,
    /// It sleeps in the transport's own receive call ([`Waiter`](crate::transport::Waiter)),
    /// not in `poll`: wake it through the waiter, not the kick eventfd.
    pub(crate) blocking: bool,
    /// When its wait ends, while it sleeps in the waiter (the driver thread wakes it then).
    pub(crate) until: Option<Nanos>,
    /// It holds the lock for a turn: what it completes itself needs no kick.
    pub(crate) in_turn: bool,
    /// The grace period that was running when it claimed leadership (see
    /// [`Receiver::Grace`]), resumed when it steps down if enough of it is left.
    pub(crate) grace: Option<Nanos>,
}

/// Who receives from the transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Receiver {
    /// The driver thread watches the transport and receives. `claimed`: a thread will lead
    /// once it waits (it started a call to block on); until then the driver thread
    /// receives for it, so that threads waiting for requests meanwhile are served.
    Driver { claimed: bool },
    /// A thread leads; the driver thread runs timers only.
    Leading(Lead),
    /// Nobody receives: a leader left with nobody waiting, and the driver thread stays off
    /// the transport until `until`, expecting it (or another) back: a thread calling in a
    /// loop then costs no epoll_ctl per call.
    Grace { until: Nanos },
    /// An event loop drives the socket through a [`Poller`](crate::Poller) from `thread`:
    /// it watches the transport and receives; the driver thread runs timers and takes over
    /// when the loop falls behind (`stall`; `turned`: when the loop last drove); only the
    /// loop's thread may lead.
    Loop { thread: ThreadId, lead: Option<Lead>, stall: Stall, turned: Nanos },
    /// Shut down: the transport is gone.
    Closed,
}

/// Whether the event loop keeps up with its input, as the driver thread sees it.
///
/// The driver thread waits for the first datagram that arrives (a one-shot watch), then
/// checks, when the loop would have been idle for the limit (`limit` in the transitions:
/// a few timer ticks), whether it has driven meanwhile; while it has and input keeps
/// coming, the next check comes a limit after the loop's last turn, with no wake-up for
/// input meanwhile (at most one wake-up a limit for a loop that keeps up). A loop that
/// has not driven for the limit while input waits is stalled: the driver thread receives
/// as if no loop were attached, until the loop drives again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stall {
    /// The driver thread waits (one-shot) for input.
    Watching,
    /// Input arrived: the driver thread looks again at `by`.
    Checking { by: Nanos },
    /// The loop fell behind: the driver thread receives until the loop drives again.
    Rescuing,
}

/// What a transition asks of the driver thread's epoll set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Watch {
    /// Nothing changes.
    Keep,
    /// The driver thread watches the transport (level-triggered).
    Start,
    /// The driver thread stops watching it.
    Stop,
    /// The driver thread waits for the transport's next readiness, once.
    Once,
}

/// How the driver thread's epoll set holds the transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Registration {
    Off,
    Level,
    /// One-shot, armed.
    Once,
    /// One-shot, fired: the kernel disarmed it.
    Spent,
}

impl Receiver {
    /// Whether the driver thread watches the transport and receives what arrives.
    pub(crate) fn driver_watches(self) -> bool {
        self.registration() == Registration::Level
    }

    fn registration(self) -> Registration {
        match self {
            Receiver::Driver { .. } | Receiver::Loop { stall: Stall::Rescuing, .. } => {
                Registration::Level
            }
            Receiver::Loop { stall: Stall::Watching, .. } => Registration::Once,
            Receiver::Loop { stall: Stall::Checking { .. }, .. } => Registration::Spent,
            Receiver::Leading(_) | Receiver::Grace { .. } | Receiver::Closed => Registration::Off,
        }
    }

    /// An event loop drives and keeps up: datagrams are its to receive.
    pub(crate) fn loop_keeps_up(self) -> bool {
        matches!(self, Receiver::Loop { stall: Stall::Watching | Stall::Checking { .. }, .. })
    }

    /// The leader, if a thread has claimed leadership.
    pub(crate) fn lead(self) -> Option<Lead> {
        match self {
            Receiver::Leading(lead) | Receiver::Loop { lead: Some(lead), .. } => Some(lead),
            Receiver::Driver { claimed: true } => Some(Lead::default()),
            _ => None,
        }
    }

    /// The leader's state, for changing it.
    pub(crate) fn lead_mut(&mut self) -> Option<&mut Lead> {
        match self {
            Receiver::Leading(lead) | Receiver::Loop { lead: Some(lead), .. } => Some(lead),
            _ => None,
        }
    }

    /// The leader sleeps in the waiter's receive call.
    pub(crate) fn leader_blocking(self) -> bool {
        self.lead().is_some_and(|l| l.blocking)
    }

    /// When the driver thread resumes watching, in a grace period.
    pub(crate) fn grace(self) -> Option<Nanos> {
        match self {
            Receiver::Grace { until } => Some(until),
            _ => None,
        }
    }

    /// When the driver thread must next look at the transport for itself: a grace period's
    /// end, or the time by which an event loop must have driven.
    pub(crate) fn deadline(self) -> Option<Nanos> {
        match self {
            Receiver::Grace { until } => Some(until),
            Receiver::Loop { stall: Stall::Checking { by, .. }, .. } => Some(by),
            _ => None,
        }
    }

    pub(crate) fn is_closed(self) -> bool {
        self == Receiver::Closed
    }

    fn change(&mut self, new: Receiver) -> Watch {
        let (before, after) = (self.registration(), new.registration());
        *self = new;
        match (before, after) {
            (b, a) if b == a => Watch::Keep,
            (_, Registration::Off) => Watch::Stop,
            (_, Registration::Level) => Watch::Start,
            (_, Registration::Once) => Watch::Once,
            // Only a one-shot watch that fired is spent, by the kernel.
            (_, Registration::Spent) => Watch::Keep,
        }
    }

    /// Thread `me` claims leadership; `false` if another thread has it (or, with an event
    /// loop attached, `me` is not the loop's thread), or the socket is closed. Nothing
    /// changes for the epoll set: while the driver thread watches it goes on (until the
    /// claimer starts leading); in a grace period the claimer leads at once (the thread
    /// calling in a loop, back).
    pub(crate) fn claim(&mut self, me: ThreadId) -> bool {
        let claimed = match *self {
            Receiver::Driver { claimed: false } => Receiver::Driver { claimed: true },
            Receiver::Grace { until } => {
                Receiver::Leading(Lead { grace: Some(until), ..Lead::default() })
            }
            Receiver::Loop { thread, lead: None, stall, turned } if thread == me => {
                Receiver::Loop { thread, lead: Some(Lead::default()), stall, turned }
            }
            _ => return false,
        };
        *self = claimed;
        true
    }

    /// The claimer starts receiving itself (it waits now, or is about to send what it will
    /// wait for): the driver thread stops watching.
    ///
    /// The loop's own thread leading shows it is not stalled: a rescuing driver thread
    /// stops receiving (it must not take what the leader waits for).
    pub(crate) fn start_leading(&mut self) -> Watch {
        let started = Lead { started: true, ..Lead::default() };
        match self {
            Receiver::Driver { claimed: true } => self.change(Receiver::Leading(started)),
            Receiver::Leading(lead) => {
                lead.started = true;
                Watch::Keep
            }
            Receiver::Loop { thread, lead: Some(lead), turned, .. } => {
                let lead = Some(Lead { started: true, ..*lead });
                let (thread, turned) = (*thread, *turned);
                self.change(Receiver::Loop { thread, lead, stall: Stall::Watching, turned })
            }
            _ => Watch::Keep,
        }
    }

    /// The claimer will wait later (a call it will block on has been started, not yet
    /// waited for): until then the driver thread receives, or threads waiting for requests
    /// meanwhile would wait for a leader that does not receive.
    pub(crate) fn watch_for_claimer(&mut self) -> Watch {
        match *self {
            Receiver::Leading(Lead { started: false, .. }) => {
                self.change(Receiver::Driver { claimed: true })
            }
            _ => Watch::Keep,
        }
    }

    /// The leader's term ends. With others waiting (calls pending, threads waiting for
    /// requests) the driver thread takes over now; else, if it was off the transport,
    /// after a grace period ending at `grace` (kept if one is already running with at
    /// least half of it left: calls in a loop then keep one deadline for a while).
    pub(crate) fn step_down(&mut self, others_wait: bool, grace: Nanos, half: Nanos) -> Watch {
        match *self {
            Receiver::Loop { thread, stall, turned, .. } => {
                *self = Receiver::Loop { thread, lead: None, stall, turned };
                Watch::Keep
            }
            Receiver::Driver { .. } => self.change(Receiver::Driver { claimed: false }),
            Receiver::Leading(_) | Receiver::Grace { .. } if others_wait => {
                self.change(Receiver::Driver { claimed: false })
            }
            Receiver::Leading(Lead { grace: Some(until), .. }) | Receiver::Grace { until }
                if until >= half =>
            {
                self.change(Receiver::Grace { until })
            }
            Receiver::Leading(_) | Receiver::Grace { .. } => {
                self.change(Receiver::Grace { until: grace })
            }
            Receiver::Closed => Watch::Keep,
        }
    }

    /// Something needs the transport watched (a future waits, the grace period is over):
    /// the driver thread watches unless a thread leads or an event loop drives.
    pub(crate) fn need_driver(&mut self) -> Watch {
        match *self {
            Receiver::Grace { .. } => self.change(Receiver::Driver { claimed: false }),
            _ => Watch::Keep,
        }
    }

    /// An event loop on `thread` attaches at `now`; `None` if one already is.
    pub(crate) fn attach(&mut self, thread: ThreadId, now: Nanos) -> Option<Watch> {
        let lead = match *self {
            Receiver::Loop { .. } | Receiver::Closed => return None,
            // A leader keeps leading; it is the loop's thread's to claim afterwards.
            Receiver::Leading(lead) => Some(lead),
            Receiver::Driver { claimed: true } => Some(Lead::default()),
            _ => None,
        };
        Some(self.change(Receiver::Loop { thread, lead, stall: Stall::Watching, turned: now }))
    }

    /// The event loop detaches: its leader (if any) leads on; otherwise the driver thread
    /// watches again.
    pub(crate) fn detach(&mut self) -> Watch {
        match *self {
            Receiver::Loop { lead: Some(lead), .. } => self.change(Receiver::Leading(lead)),
            Receiver::Loop { lead: None, .. } => self.change(Receiver::Driver { claimed: false }),
            _ => Watch::Keep,
        }
    }

    /// The event loop's thread turns at `now` (it is the last one that drove): it keeps
    /// up.
    pub(crate) fn loop_turn(&mut self, me: ThreadId, now: Nanos) -> Watch {
        let Receiver::Loop { lead, stall, .. } = *self else { return Watch::Keep };
        let stall = if stall == Stall::Rescuing { Stall::Watching } else { stall };
        self.change(Receiver::Loop { thread: me, lead, stall, turned: now })
    }

    /// The driver thread's one-shot watch fired at `now`: it looks again a `limit` later.
    pub(crate) fn input_arrived(&mut self, now: Nanos, limit: Nanos) -> Watch {
        match *self {
            Receiver::Loop { thread, lead, stall: Stall::Watching, turned } => {
                let stall = Stall::Checking { by: now + limit };
                self.change(Receiver::Loop { thread, lead, stall, turned })
            }
            _ => Watch::Keep,
        }
    }

    /// The time to check has come (`deadline`). Nothing waits (the loop took it all), or
    /// the loop's thread leads: the driver thread waits for input again. The loop drove
    /// within the `limit` and input waits (a steady stream): the next check a `limit`
    /// after that turn. The loop did not, and input waits: the driver thread takes over.
    pub(crate) fn check(&mut self, now: Nanos, limit: Nanos, input_waiting: bool) -> Watch {
        let Receiver::Loop { thread, lead, stall: Stall::Checking { by }, turned } = *self else {
            return Watch::Keep;
        };
        if by > now {
            return Watch::Keep;
        }
        let stall = if lead.is_some() || !input_waiting {
            Stall::Watching
        } else if now < turned + limit {
            Stall::Checking { by: turned + limit }
        } else {
            Stall::Rescuing
        };
        self.change(Receiver::Loop { thread, lead, stall, turned })
    }

    /// The driver thread receives for a stalled event loop.
    pub(crate) fn rescuing(self) -> bool {
        matches!(self, Receiver::Loop { stall: Stall::Rescuing, .. })
    }

    /// Shut down. The driver thread's epoll set is left as it is (the descriptor is gone).
    pub(crate) fn close(&mut self) {
        *self = Receiver::Closed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Nanos = 4_000_000;
    const TICK: Nanos = 1_000_000;

    fn me() -> ThreadId {
        std::thread::current().id()
    }

    fn other() -> ThreadId {
        std::thread::spawn(|| std::thread::current().id()).join().unwrap()
    }

    #[test]
    fn a_leader_takes_the_transport_and_gives_it_back() {
        let mut r = Receiver::Driver { claimed: false };
        assert!(r.driver_watches());
        assert!(r.claim(me()), "claimed: the driver still watches");
        assert_eq!(r, Receiver::Driver { claimed: true });
        assert!(!r.claim(other()), "one leader at a time");
        assert_eq!(r.start_leading(), Watch::Stop);
        assert!(matches!(r, Receiver::Leading(_)) && r.lead().is_some());
        // Nobody else waits: a grace period, the driver thread stays off.
        assert_eq!(r.step_down(false, GRACE, GRACE / 2), Watch::Keep);
        assert_eq!(r.grace(), Some(GRACE));
        // A leader back within it leads at once, without an epoll change...
        assert!(r.claim(me()));
        assert_eq!(r.start_leading(), Watch::Keep);
        assert_eq!(r.grace(), None, "no grace deadline while a thread leads");
        // ... and leaving, resumes the grace period while half of it is left.
        assert_eq!(r.step_down(false, 2 * GRACE, GRACE - 1), Watch::Keep);
        assert_eq!(r.grace(), Some(GRACE));
        assert!(r.claim(me()));
        assert_eq!(r.step_down(false, 2 * GRACE, GRACE + 1), Watch::Keep);
        assert_eq!(r.grace(), Some(2 * GRACE), "less than half left: a new one");
        // Others wait: the driver thread takes over at once.
        assert!(r.claim(me()));
        assert_eq!(r.step_down(true, GRACE, GRACE / 2), Watch::Start);
        assert_eq!(r, Receiver::Driver { claimed: false });
    }

    #[test]
    fn a_grace_period_is_kept_while_half_of_it_is_left_and_ends_when_needed() {
        let mut r = Receiver::Grace { until: 10 };
        assert_eq!(r.step_down(false, 20, 5), Watch::Keep);
        assert_eq!(r.grace(), Some(10), "more than half left: kept");
        assert_eq!(r.step_down(false, 20, 15), Watch::Keep);
        assert_eq!(r.grace(), Some(20), "less than half left: moved");
        assert_eq!(r.need_driver(), Watch::Start);
        assert!(r.driver_watches());
        assert_eq!(r.need_driver(), Watch::Keep);
    }

    #[test]
    fn a_claimer_that_resigns_before_leading_changes_nothing() {
        let mut r = Receiver::Driver { claimed: false };
        assert!(r.claim(me()));
        assert_eq!(r.step_down(false, GRACE, GRACE / 2), Watch::Keep);
        assert_eq!(r, Receiver::Driver { claimed: false });
    }

    #[test]
    fn a_claimer_that_waits_later_has_the_driver_receive_meanwhile() {
        let mut r = Receiver::Grace { until: GRACE };
        assert!(r.claim(me()));
        assert_eq!(r.watch_for_claimer(), Watch::Start);
        assert_eq!(r, Receiver::Driver { claimed: true });
        assert_eq!(r.start_leading(), Watch::Stop, "it waits now");
        assert_eq!(r.watch_for_claimer(), Watch::Keep, "no longer before its wait");
    }

    #[test]
    fn with_an_event_loop_only_its_thread_leads() {
        let mut r = Receiver::Driver { claimed: false };
        let loop_thread = me();
        assert_eq!(r.attach(loop_thread, 0), Some(Watch::Once), "it waits for a stall");
        assert_eq!(r.attach(loop_thread, 0), None, "one event loop at a time");
        assert!(!r.driver_watches());
        assert!(!r.claim(other()));
        assert!(r.claim(loop_thread));
        assert_eq!(r.start_leading(), Watch::Keep, "the loop watches, not the driver");
        assert_eq!(r.step_down(true, GRACE, GRACE / 2), Watch::Keep);
        assert_eq!(r.need_driver(), Watch::Keep);
        assert_eq!(r.detach(), Watch::Start);
        assert!(r.driver_watches());
    }

    #[test]
    fn a_leader_outlives_an_event_loop_attached_and_detached_meanwhile() {
        let mut r = Receiver::Leading(Lead { blocking: true, ..Lead::default() });
        assert_eq!(r.attach(me(), 0), Some(Watch::Once));
        assert!(r.leader_blocking());
        assert_eq!(r.detach(), Watch::Stop);
        assert!(matches!(r, Receiver::Leading(_)));
    }

    #[test]
    fn a_stalled_event_loop_has_the_driver_thread_receive_until_it_drives_again() {
        const LIMIT: Nanos = 2 * TICK;
        let mut r = Receiver::Driver { claimed: false };
        assert_eq!(r.attach(me(), 0), Some(Watch::Once));
        assert!(r.loop_keeps_up() && r.deadline().is_none());
        // Input arrives: the driver thread looks again a limit later.
        assert_eq!(r.input_arrived(TICK, LIMIT), Watch::Keep, "the one-shot watch is spent");
        assert_eq!(r.deadline(), Some(3 * TICK));
        assert_eq!(r.input_arrived(2 * TICK, LIMIT), Watch::Keep);
        assert_eq!(r.deadline(), Some(3 * TICK), "the first arrival counts");
        assert_eq!(r.check(3 * TICK - 1, LIMIT, true), Watch::Keep, "not yet");
        // The loop has not driven since it attached, and input waits: the driver receives.
        assert_eq!(r.check(3 * TICK, LIMIT, true), Watch::Start);
        assert!(r.rescuing() && r.driver_watches() && !r.loop_keeps_up());
        assert_eq!(r.deadline(), None);
        // The loop drives again: it receives, the driver thread waits for input again.
        assert_eq!(r.loop_turn(me(), 4 * TICK), Watch::Once);
        assert!(r.loop_keeps_up() && !r.driver_watches());

        // A loop that left nothing waiting keeps its socket: the driver thread waits for
        // input again.
        assert_eq!(r.input_arrived(5 * TICK, LIMIT), Watch::Keep);
        assert_eq!(r.check(7 * TICK, LIMIT, false), Watch::Once);
        assert!(r.loop_keeps_up());
        // One that drove within the limit, with more waiting (a steady stream), is looked
        // at again a limit after that turn, without a wake-up for each arrival.
        assert_eq!(r.input_arrived(8 * TICK, LIMIT), Watch::Keep);
        assert_eq!(r.loop_turn(me(), 9 * TICK), Watch::Keep);
        assert_eq!(r.check(10 * TICK, LIMIT, true), Watch::Keep);
        assert!(r.loop_keeps_up() && r.deadline() == Some(11 * TICK));
        assert_eq!(r.check(11 * TICK, LIMIT, true), Watch::Start, "it did not drive again");
        assert_eq!(r.loop_turn(me(), 12 * TICK), Watch::Once);

        // The loop's thread leading (a blocking call on it) is not a stall, and ends one.
        assert_eq!(r.input_arrived(13 * TICK, LIMIT), Watch::Keep);
        assert_eq!(r.check(15 * TICK, LIMIT, true), Watch::Start);
        assert!(r.claim(me()));
        assert_eq!(r.start_leading(), Watch::Once, "the leader takes its own datagrams");
        assert!(r.loop_keeps_up());
        assert_eq!(r.input_arrived(16 * TICK, LIMIT), Watch::Keep);
        assert_eq!(r.check(18 * TICK, LIMIT, true), Watch::Once);
        assert_eq!(r.step_down(true, GRACE, GRACE / 2), Watch::Keep);

        // Detached while rescuing: the driver thread just goes on.
        assert_eq!(r.input_arrived(19 * TICK, LIMIT), Watch::Keep);
        assert_eq!(r.check(21 * TICK, LIMIT, true), Watch::Start);
        assert_eq!(r.detach(), Watch::Keep);
        assert_eq!(r, Receiver::Driver { claimed: false });
    }

    #[test]
    fn closed_is_final() {
        for mut r in [
            Receiver::Driver { claimed: true },
            Receiver::Leading(Lead::default()),
            Receiver::Grace { until: 1 },
            Receiver::Loop { thread: me(), lead: None, stall: Stall::Rescuing, turned: 0 },
        ] {
            r.close();
            assert!(r.is_closed());
            assert!(!r.claim(me()));
            assert_eq!(r.attach(me(), 0), None);
            assert_eq!(r.need_driver(), Watch::Keep);
            assert_eq!(r.step_down(true, GRACE, GRACE / 2), Watch::Keep);
            assert!(r.is_closed());
        }
    }
}
