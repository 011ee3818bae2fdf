//! Sharing a node's GPUs by memory: the node setting ([`GpuSharing`]), what a statement asks for
//! ([`DeviceDemand`]), where its instances go, and the admission rule with its backfill.
//!
//! # The rule
//!
//! The lease queue ranks its waiters (precedence with aging, then arrival; see
//! [`LeaseQueue`](crate::LeaseQueue)). Whenever something changes (an arrival, a release, a
//! waiter leaving, a new reading of other processes' memory) it walks them in that order:
//!
//! 1. The first waiter (the *head*) is admitted if its demand fits in the room left now: a
//!    [`DeviceDemand::Whole`] demand when nothing else is admitted; a [`DeviceDemand::Memory`]
//!    demand when each instance finds a device with room for it. Then the next waiter is the
//!    head, and so on.
//! 2. A head that does not fit gets a *shadow*: a placement of its instances computed on the
//!    devices' memory less what the leases that overtook it (below) reserve. It is the room the
//!    head will take once the leases admitted before it became the head have ended.
//! 3. A waiter behind a waiting head may *backfill*, i.e. be admitted before it, only on memory
//!    that is free now **and** outside the head's shadow (for a whole-device head, none). It is
//!    marked as having overtaken that head.
//!
//! **The head cannot starve.** Each backfill is placed outside the shadow, so while a head `H`
//! waits, the shadow plus what the leases that overtook `H` reserve never exceeds the devices'
//! usable memory. The other leases were admitted before `H` became the head: finitely many,
//! each ending within its hold (bounded by the lease-hold limit and the statement timeout).
//! When the last of them ends, the room left is at least the shadow, and `H` is admitted at
//! that release. So a backfill never delays the head's start; it only uses memory the head would
//! not have used before then. (The one thing outside the rule: other processes taking more
//! device memory meanwhile, which shrinks every device's usable memory; the shadow is then
//! recomputed.)
//!
//! Under [`GpuSharing::Exclusive`] every demand is whole, no shadow leaves room for a backfill,
//! and the rule is exactly the exclusive lease: one statement at a time, in rank order.

use std::fmt;

use crate::units::format_bytes;
use crate::{Result, invalid_value_err};

/// The share of each device's memory that memory-shared leases leave free unless
/// [`LeaseQueue::with_sharing`](crate::LeaseQueue::with_sharing) says otherwise: 10%.
pub const DEFAULT_HEADROOM_PERCENT: u32 = 10;

/// How a node's lease queue shares its GPUs among statements.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum GpuSharing {
    /// One statement at a time owns every device (Exasol's rule; the default).
    #[default]
    Exclusive,
    /// Statements that declare their device memory share devices while their reservations fit;
    /// a statement that declares none still gets every device to itself.
    Memory,
}

impl GpuSharing {
    /// Parses `exclusive` or `memory` (any case, surrounding blanks ignored).
    ///
    /// # Errors
    ///
    /// [`SchedulerError::InvalidValue`](crate::SchedulerError::InvalidValue) for anything else.
    pub fn parse(text: &str) -> Result<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "exclusive" => Ok(Self::Exclusive),
            "memory" => Ok(Self::Memory),
            other => Err(invalid_value_err!(
                "gpu_sharing",
                "'{other}' is neither 'exclusive' (one statement owns every GPU) nor 'memory' \
                 (statements share a GPU while their declared memory fits)"
            )),
        }
    }

    /// `exclusive` or `memory`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exclusive => "exclusive",
            Self::Memory => "memory",
        }
    }
}

impl fmt::Display for GpuSharing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one statement needs of the node's GPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DeviceDemand {
    /// Every device to itself: a GPU call that declares no device memory, and every request
    /// under [`GpuSharing::Exclusive`].
    #[default]
    Whole,
    /// Instances of so many bytes of device memory each; each instance runs on one device.
    Memory(Vec<u64>),
}

impl DeviceDemand {
    /// Total bytes a memory demand asks for (0 for a whole one).
    pub fn bytes(&self) -> u64 {
        match self {
            Self::Whole => 0,
            Self::Memory(v) => v.iter().fold(0u64, |a, b| a.saturating_add(*b)),
        }
    }
}

/// What an admitted lease holds: every device, or so many bytes on some of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reservation {
    /// Every device to itself.
    pub(crate) whole: bool,
    /// Bytes reserved on each device (by position; all 0 for a whole reservation).
    pub(crate) per_device: Vec<u64>,
    /// The device position of each instance of a memory demand, in the demand's order.
    pub(crate) instance_devices: Vec<usize>,
}

impl Reservation {
    pub(crate) fn whole(devices: usize) -> Self {
        Self {
            whole: true,
            per_device: vec![0; devices],
            instance_devices: Vec::new(),
        }
    }

    fn placed(demand: &[u64], instance_devices: Vec<usize>, devices: usize) -> Self {
        let mut per_device = vec![0u64; devices];
        for (bytes, d) in demand.iter().zip(&instance_devices) {
            per_device[*d] = per_device[*d].saturating_add(*bytes);
        }
        Self {
            whole: false,
            per_device,
            instance_devices,
        }
    }

    /// Device positions this reservation uses, ascending.
    pub(crate) fn devices_used(&self) -> Vec<usize> {
        if self.whole {
            return (0..self.per_device.len()).collect();
        }
        let mut used: Vec<usize> = self.instance_devices.clone();
        used.sort_unstable();
        used.dedup();
        used
    }
}

/// Why a memory demand does not fit: the device with the most room, and how many bytes its
/// largest unplaced instance lacks there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Short {
    pub(crate) device: usize,
    pub(crate) bytes: u64,
    pub(crate) instance: u64,
    pub(crate) room: u64,
}

/// Places the instances of `demand` on devices with `room` bytes free: largest first, each on
/// the device with the most room left that holds it (ties: the lowest position), so instances
/// spread over the devices ("n tasks, one GPU each") before they pile up on one.
pub(crate) fn place(demand: &[u64], room: &[u64]) -> std::result::Result<Vec<usize>, Short> {
    let mut room = room.to_vec();
    let mut order: Vec<usize> = (0..demand.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(demand[i]));
    let mut at = vec![0usize; demand.len()];
    for i in order {
        let need = demand[i];
        let best = room
            .iter()
            .enumerate()
            .max_by_key(|(d, r)| (**r, std::cmp::Reverse(*d)))
            .map(|(d, r)| (d, *r));
        match best {
            Some((d, r)) if r >= need => {
                room[d] -= need;
                at[i] = d;
            }
            other => {
                let (device, have) = other.unwrap_or((0, 0));
                return Err(Short {
                    device,
                    bytes: need - have,
                    instance: need,
                    room: have,
                });
            }
        }
    }
    Ok(at)
}

/// `demand` placed in `room`, as a reservation. A whole demand fits only when `nothing_admitted`.
pub(crate) fn fit(
    demand: &DeviceDemand,
    room: &[u64],
    nothing_admitted: bool,
) -> Option<Reservation> {
    match demand {
        DeviceDemand::Whole => nothing_admitted.then(|| Reservation::whole(room.len())),
        DeviceDemand::Memory(v) => place(v, room)
            .ok()
            .map(|at| Reservation::placed(v, at, room.len())),
    }
}

/// One admission decided by [`decide`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Admission {
    pub(crate) ticket: u64,
    pub(crate) reservation: Reservation,
    /// The waiting head this lease overtook (a backfill), if any.
    pub(crate) past: Option<u64>,
}

/// Bytes per device of `reservations`, and whether any is whole.
fn totals<'a>(
    devices: usize,
    reservations: impl Iterator<Item = &'a Reservation>,
) -> (Vec<u64>, bool, usize) {
    let mut sum = vec![0u64; devices];
    let mut whole = false;
    let mut count = 0;
    for r in reservations {
        count += 1;
        whole |= r.whole;
        for (s, b) in sum.iter_mut().zip(&r.per_device) {
            *s = s.saturating_add(*b);
        }
    }
    (sum, whole, count)
}

fn minus(a: &[u64], b: &[u64]) -> Vec<u64> {
    a.iter().zip(b).map(|(x, y)| x.saturating_sub(*y)).collect()
}

/// Whether `reservation` (a memory one) fits as placed in `room`.
fn fits_as_placed(reservation: &Reservation, room: &[u64]) -> bool {
    !reservation.whole
        && reservation
            .per_device
            .iter()
            .zip(room)
            .all(|(need, have)| need <= have)
}

/// Applies the rule (see the module's docs) once: which of the `ranked` waiters (in rank order,
/// none of them admitted yet) are admitted now, given the devices' `usable` memory and the
/// leases `admitted` already (each with the head it overtook, if it did). `shadow` is the waiting
/// head's shadow, kept between calls so that it only moves when it must.
pub(crate) fn decide(
    usable: &[u64],
    admitted: &[(&Reservation, Option<u64>)],
    ranked: &[(u64, &DeviceDemand)],
    shadow: &mut Option<(u64, Reservation)>,
) -> Vec<Admission> {
    let n = usable.len();
    // A shadow belongs to a waiting head: gone once that waiter is admitted or has left.
    if shadow
        .as_ref()
        .is_some_and(|(t, _)| !ranked.iter().any(|(r, _)| r == t))
    {
        *shadow = None;
    }
    let (mut reserved, mut whole_held, mut count) = totals(n, admitted.iter().map(|(r, _)| *r));
    let mut out = Vec::new();
    // The waiting head, and the room a backfill may use outside its shadow.
    let mut head: Option<(u64, Vec<u64>)> = None;
    for &(ticket, demand) in ranked {
        let room = if whole_held {
            vec![0; n]
        } else {
            minus(usable, &reserved)
        };
        let Some((head_ticket, backfill_room)) = &mut head else {
            let stored = shadow
                .as_ref()
                .filter(|(t, _)| *t == ticket)
                .map(|(_, s)| s);
            let chosen = fit(demand, &room, count == 0)
                .or_else(|| stored.filter(|s| fits_as_placed(s, &room)).cloned());
            if let Some(reservation) = chosen {
                for (s, b) in reserved.iter_mut().zip(&reservation.per_device) {
                    *s = s.saturating_add(*b);
                }
                whole_held |= reservation.whole;
                count += 1;
                out.push(Admission {
                    ticket,
                    reservation,
                    past: None,
                });
                continue;
            }
            // The head waits: its shadow is where it goes once the leases admitted before it
            // became the head have ended, next to those that overtook it.
            let (past, _, past_count) = totals(
                n,
                admitted
                    .iter()
                    .filter(|(_, p)| *p == Some(ticket))
                    .map(|(r, _)| *r),
            );
            let after = minus(usable, &past);
            let keep = stored
                .filter(|s| s.whole || fits_as_placed(s, &after))
                .cloned();
            let new_shadow = keep.or_else(|| fit(demand, &after, past_count == 0));
            *shadow = new_shadow.clone().map(|s| (ticket, s));
            match new_shadow {
                // A whole-device head, or one that no longer fits even then (other processes
                // took memory): nobody overtakes it.
                None => break,
                Some(s) if s.whole => break,
                Some(s) => {
                    let outside = minus(&after, &s.per_device);
                    head = Some((ticket, outside));
                }
            }
            continue;
        };
        // A backfill: memory free now and outside the head's shadow.
        let DeviceDemand::Memory(_) = demand else {
            continue;
        };
        let allowed: Vec<u64> = room
            .iter()
            .zip(backfill_room.iter())
            .map(|(a, b)| (*a).min(*b))
            .collect();
        if let Some(reservation) = fit(demand, &allowed, false) {
            for ((s, b), o) in reserved
                .iter_mut()
                .zip(&reservation.per_device)
                .zip(backfill_room.iter_mut())
            {
                *s = s.saturating_add(*b);
                *o = o.saturating_sub(*b);
            }
            count += 1;
            out.push(Admission {
                ticket,
                reservation,
                past: Some(*head_ticket),
            });
        }
    }
    out
}

/// Whether process `pid` is this process or one it started (directly, or through a fork
/// server it started): such processes are our script workers, whose device memory the queue
/// counts by their reservations. Reads `/proc` (Linux); elsewhere only this process is ours.
pub(crate) fn is_own_process(pid: u32) -> bool {
    let me = std::process::id();
    let mut at = pid;
    for _ in 0..4 {
        if at == me {
            return true;
        }
        let Some(parent) = parent_of(at) else {
            return false;
        };
        if parent <= 1 {
            return false;
        }
        at = parent;
    }
    at == me
}

/// The parent of `pid` from `/proc/PID/stat` (the field after the command's closing paren).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Says why a waiter with `demand` cannot start in `room`, for `accelsql.gpu_leases`.
pub(crate) fn why_short(
    demand: &DeviceDemand,
    room: &[u64],
    index_of: impl Fn(usize) -> u32,
) -> Option<String> {
    match demand {
        DeviceDemand::Whole => None,
        DeviceDemand::Memory(v) => match place(v, room) {
            Ok(_) => None,
            Err(s) => Some(format!(
                "GPU {} is {} short: an instance needs {}, {} is free to reserve there",
                index_of(s.device),
                format_bytes(s.bytes),
                format_bytes(s.instance),
                format_bytes(s.room)
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    const G: u64 = 1 << 30;

    #[test]
    fn sharing_parses_both_modes_and_refuses_others() {
        assert_eq!(GpuSharing::parse(" Memory ").unwrap(), GpuSharing::Memory);
        assert_eq!(
            GpuSharing::parse("EXCLUSIVE").unwrap(),
            GpuSharing::Exclusive
        );
        let e = GpuSharing::parse("shared").unwrap_err();
        assert_eq!(e.code(), "22G01");
        assert!(e.to_string().contains("'shared'"), "{e}");
        assert_eq!(GpuSharing::default().to_string(), "exclusive");
    }

    #[test]
    fn instances_spread_over_devices_before_they_pile_up() {
        assert_eq!(place(&[G, G, G], &[10 * G, 10 * G]).unwrap(), vec![0, 1, 0]);
        // Largest first, each where the most room is left.
        assert_eq!(place(&[G, 6 * G], &[8 * G, 7 * G]).unwrap(), vec![1, 0]);
        let short = place(&[5 * G, 5 * G], &[8 * G, 4 * G]).unwrap_err();
        // The first goes to device 0 (3 left), the second finds at most 4: 1 short.
        assert_eq!((short.device, short.bytes), (1, G));
        assert!(place(&[], &[]).unwrap().is_empty());
        assert_eq!(place(&[1], &[]).unwrap_err().bytes, 1);
    }

    #[test]
    fn a_head_that_waits_is_not_delayed_by_a_backfill() {
        // One device of 10: a holder of 6, a head of 8 waiting, then a small waiter of 2.
        let usable = [10 * G];
        let holder = Reservation::placed(&[6 * G], vec![0], 1);
        let head = DeviceDemand::Memory(vec![8 * G]);
        let small = DeviceDemand::Memory(vec![2 * G]);
        let mut shadow = None;
        let out = decide(
            &usable,
            &[(&holder, None)],
            &[(1, &head), (2, &small)],
            &mut shadow,
        );
        // 4 are free now, but 8 of 10 are the head's shadow: the small one may take 2.
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].ticket, out[0].past), (2, Some(1)));
        let small_held = out[0].reservation.clone();
        // A second small one would leave the head short when the holder ends: it waits.
        let out = decide(
            &usable,
            &[(&holder, None), (&small_held, Some(1))],
            &[(1, &head), (3, &small)],
            &mut shadow,
        );
        assert!(out.is_empty(), "{out:?}");
        // The holder ends: the head starts beside the backfill.
        let out = decide(
            &usable,
            &[(&small_held, Some(1))],
            &[(1, &head), (3, &small)],
            &mut shadow,
        );
        assert_eq!(out.iter().map(|a| a.ticket).collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn nobody_overtakes_a_whole_device_head() {
        let usable = [10 * G, 10 * G];
        let holder = Reservation::placed(&[G], vec![0], 2);
        let small = DeviceDemand::Memory(vec![G]);
        let mut shadow = None;
        let out = decide(
            &usable,
            &[(&holder, None)],
            &[(1, &DeviceDemand::Whole), (2, &small)],
            &mut shadow,
        );
        assert!(out.is_empty());
        let out = decide(
            &usable,
            &[],
            &[(1, &DeviceDemand::Whole), (2, &small)],
            &mut shadow,
        );
        assert_eq!(out.len(), 1);
        assert!(out[0].reservation.whole);
    }

    /// A small deterministic generator (xorshift), so the property tests need no crate.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self, below: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % below.max(1)
        }
    }

    /// Random arrivals, sizes and hold times on 1 to 3 devices, stepped in discrete time: the
    /// rule never reserves more than a device's usable memory, a waiting head is never delayed
    /// by a backfill (it starts no later than the leases admitted before it became the head
    /// end), and everything admitted is released.
    #[test]
    fn random_workloads_never_oversubscribe_and_never_starve_the_head() {
        let (mut backfills, mut shared_steps) = (0, 0);
        for seed in 1..=300u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let n = 1 + rng.next(3) as usize;
            let usable: Vec<u64> = (0..n).map(|_| 4 + rng.next(12)).collect();
            let jobs = 5 + rng.next(30) as usize;
            // (arrival, demand, hold)
            let mut pending: Vec<(u64, DeviceDemand, u64)> = (0..jobs)
                .map(|_| {
                    let demand = if rng.next(10) == 0 {
                        DeviceDemand::Whole
                    } else {
                        let max = *usable.iter().max().unwrap();
                        DeviceDemand::Memory(
                            (0..1 + rng.next(3)).map(|_| 1 + rng.next(max)).collect(),
                        )
                    };
                    (rng.next(40), demand, 1 + rng.next(10))
                })
                .collect();
            pending.sort_by_key(|j| j.0);
            // Demands that never fit even on empty devices would be refused at arrival.
            pending.retain(|(_, d, _)| match d {
                DeviceDemand::Whole => true,
                DeviceDemand::Memory(v) => place(v, &usable).is_ok(),
            });
            let total = pending.len();
            let mut waiting: Vec<(u64, DeviceDemand, u64)> = Vec::new(); // (ticket, demand, hold)
            let mut held: Vec<(u64, Reservation, Option<u64>, u64)> = Vec::new(); // ends at
            let mut shadow = None;
            let mut head_since: Option<(u64, u64, u64)> = None; // (ticket, became head, bound)
            let mut done = 0;
            let mut next_ticket = 0;
            for now in 0..10_000u64 {
                held.retain(|h| {
                    let keep = h.3 > now;
                    done += usize::from(!keep);
                    keep
                });
                while pending.first().is_some_and(|j| j.0 <= now) {
                    let (_, d, hold) = pending.remove(0);
                    next_ticket += 1;
                    waiting.push((next_ticket, d, hold));
                }
                let ranked: Vec<(u64, &DeviceDemand)> =
                    waiting.iter().map(|(t, d, _)| (*t, d)).collect();
                let admitted: Vec<(&Reservation, Option<u64>)> =
                    held.iter().map(|h| (&h.1, h.2)).collect();
                let out = decide(&usable, &admitted, &ranked, &mut shadow);
                for a in out {
                    backfills += usize::from(a.past.is_some());
                    let at = waiting.iter().position(|w| w.0 == a.ticket).unwrap();
                    let (_, _, hold) = waiting.remove(at);
                    if let Some((t, _, bound)) = head_since
                        && t == a.ticket
                    {
                        assert!(
                            now <= bound,
                            "seed {seed}: head {t} started at {now}, bound {bound}"
                        );
                    }
                    held.push((a.ticket, a.reservation, a.past, now + hold));
                }
                // Never more than usable, and a whole lease alone.
                let (sum, whole, count) = totals(n, held.iter().map(|h| &h.1));
                assert!(!whole || count == 1, "seed {seed}: whole lease shared");
                shared_steps += usize::from(count > 1);
                for (s, u) in sum.iter().zip(&usable) {
                    assert!(s <= u, "seed {seed}: {s} reserved of {u}");
                }
                // The head's bound: the latest end of the leases not overtaking it.
                match waiting.first() {
                    Some((t, _, _)) if head_since.is_none_or(|h| h.0 != *t) => {
                        let bound = held
                            .iter()
                            .filter(|h| h.2 != Some(*t))
                            .map(|h| h.3)
                            .max()
                            .unwrap_or(now);
                        head_since = Some((*t, now, bound));
                    }
                    None => head_since = None,
                    _ => {}
                }
                if pending.is_empty() && waiting.is_empty() && held.is_empty() {
                    break;
                }
            }
            assert_eq!(done, total, "seed {seed}: every lease ran and ended");
        }
        // The workloads do exercise the rule: leases share devices, and some overtake a head.
        assert!(
            backfills > 100 && shared_steps > 1000,
            "{backfills} {shared_steps}"
        );
    }

    #[test]
    fn this_process_and_its_children_are_ours_others_are_not() {
        assert!(is_own_process(std::process::id()));
        if std::path::Path::new("/proc/self/stat").exists() {
            let mut child = std::process::Command::new("sleep")
                .arg("5")
                .spawn()
                .unwrap();
            assert!(is_own_process(child.id()));
            let _ = child.kill();
            let _ = child.wait();
            assert!(!is_own_process(1));
        }
    }

    #[test]
    fn a_short_waiter_says_which_device_and_by_how_much() {
        let why = why_short(&DeviceDemand::Memory(vec![6 * G]), &[G, 4 * G], |d| {
            d as u32 + 3
        })
        .unwrap();
        assert!(why.contains("GPU 4 is 2.0 GiB short"), "{why}");
        assert!(why_short(&DeviceDemand::Memory(vec![G]), &[G], |d| d as u32).is_none());
    }
}
