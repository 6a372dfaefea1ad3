//! An ideal scheduler to compare Homa with, run on the very messages a Homa run generated.
//!
//! What it models: each message is a fluid flow at its sender's full link rate, with no
//! packets, headers, grants, latency or switch queues. At every arrival and completion it
//! serves messages in order of fewest bytes left (then oldest), each one only if neither its
//! sender nor its receiver already serves a message ahead of it: greedy SRPT matching on the
//! host links. Slowdown = completion time / (size / link rate), so a message that never waits
//! has exactly 1; Homa's slowdowns divide by a time that also counts headers and latency, so
//! the two compare as times only for long messages.
//!
//! How it differs from the paper's SRPT-Oracle, which makes the same greedy matching per
//! packet: ours preempts at once when a shorter message arrives, where the paper's finishes
//! the packet on the wire first, and ours sends no headers. Neither difference matters for
//! messages of many packets: on W4 and W5 ours gives 0.99-1.04x the paper's oracle p99s on
//! average (homa-sim/RESULTS.md).

use crate::message::Msg;
use crate::report::Stats;

/// A message in the oracle: what is left of it, and which arrival it is.
#[derive(Debug, Clone, Copy)]
struct Job {
    /// Picoseconds of transmission left at the link rate.
    left_ps: u64,
    /// Index into the arrivals: their order is age, so ties go to the oldest.
    seq: u32,
}

impl Job {
    fn key(&self) -> (u64, u32) {
        (self.left_ps, self.seq)
    }
}

/// Runs `arrivals` (in time order) through the oracle and records the measured messages'
/// slowdowns in `stats`. `sizes` are the workload's sizes by index.
pub(crate) fn run(arrivals: &[Msg], sizes: &[u64], hosts: usize, host_bps: u64, stats: &mut Stats) {
    debug_assert!(arrivals.is_sorted_by_key(|a| a.created), "arrivals come in time order");
    let ps_per_byte = 8e12 / host_bps as f64;
    let work_ps: Vec<u64> = sizes.iter().map(|&s| (s as f64 * ps_per_byte).ceil() as u64).collect();
    // Active messages, always in SRPT order (`Job::key`).
    let mut jobs: Vec<Job> = Vec::new();
    let (mut served, mut waiting): (Vec<Job>, Vec<Job>) = (Vec::new(), Vec::new());
    let (mut src_busy, mut dst_busy) = (vec![false; hosts], vec![false; hosts]);
    let (mut now, mut next) = (0u64, 0usize);
    loop {
        while let Some(a) = arrivals.get(next).filter(|a| a.created * 1000 <= now) {
            let job = Job { left_ps: work_ps[a.size_index as usize], seq: next as u32 };
            let at = jobs.partition_point(|j| j.key() < job.key());
            jobs.insert(at, job);
            next += 1;
        }
        // Greedy matching: each message in order, unless its sender or receiver already
        // serves one ahead of it. A message that waits reserves nothing.
        for job in jobs.drain(..) {
            let a = &arrivals[job.seq as usize];
            let (s, d) = (a.src as usize, a.dst as usize);
            if src_busy[s] || dst_busy[d] {
                waiting.push(job);
            } else {
                (src_busy[s], dst_busy[d]) = (true, true);
                served.push(job);
            }
        }
        for job in &served {
            let a = &arrivals[job.seq as usize];
            (src_busy[a.src as usize], dst_busy[a.dst as usize]) = (false, false);
        }
        // The matching holds until the next arrival or completion.
        let first_done = served.first().map(|j| j.left_ps);
        let next_arrival = arrivals.get(next).map(|a| a.created * 1000 - now);
        let step = match (first_done, next_arrival) {
            (None, None) => break,
            (Some(d), Some(a)) => d.min(a),
            (Some(d), None) => d,
            (None, Some(a)) => a,
        };
        now += step;
        // Served messages advance together: they keep their order among themselves and can
        // only pass waiting ones, so one merge restores the SRPT order.
        let mut rest = waiting.drain(..).peekable();
        for mut job in served.drain(..) {
            job.left_ps -= step;
            if job.left_ps == 0 {
                let a = &arrivals[job.seq as usize];
                if a.measured {
                    let ideal = work_ps[a.size_index as usize] as f64;
                    stats.record(a.size_index as usize, (now - a.created * 1000) as f64 / ideal);
                }
                continue;
            }
            while let Some(w) = rest.next_if(|w| w.key() < job.key()) {
                jobs.push(w);
            }
            jobs.push(job);
        }
        jobs.extend(rest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use homa_core::workload::Workload;

    /// Runs messages (arrival ns, src, dst, size index) on 10 Gbit/s links; returns each
    /// one's slowdown in arrival order (one size per bin).
    fn slowdowns(sizes: &[u64], msgs: &[(u64, u32, u32, u32)]) -> Vec<f64> {
        let cdf: String = sizes
            .iter()
            .enumerate()
            .map(|(i, s)| format!("{s} {}\n", (i + 1) as f64 / sizes.len() as f64))
            .collect();
        let w = Workload::parse("test", &cdf).unwrap();
        msgs.iter()
            .enumerate()
            .map(|(k, _)| {
                // Measure one message at a time, so each bin holds its slowdown alone.
                let arrivals: Vec<Msg> = msgs
                    .iter()
                    .enumerate()
                    .map(|(i, &(created, src, dst, size_index))| Msg {
                        created,
                        src,
                        dst,
                        size_index,
                        measured: i == k,
                    })
                    .collect();
                let mut stats = Stats::new(&w, sizes);
                run(&arrivals, sizes, 4, 10_000_000_000, &mut stats);
                let all: Vec<f64> = stats.samples().collect();
                assert_eq!(all.len(), 1, "the measured message completed");
                all[0]
            })
            .collect()
    }

    fn assert_close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{got:?} != {want:?}");
        }
    }

    #[test]
    fn a_message_alone_takes_its_size_over_the_link_rate() {
        assert_close(&slowdowns(&[1000, 10_000], &[(5, 0, 1, 1)]), &[1.0]);
    }

    #[test]
    fn a_shorter_message_preempts_a_longer_one_at_their_receiver() {
        // 10,000 bytes take 8 us; 1,000 bytes arriving at 2 us from another sender take
        // 0.8 us first, so the long one ends at 8.8 us.
        let s = slowdowns(&[1000, 10_000], &[(0, 0, 2, 1), (2000, 1, 2, 0)]);
        assert_close(&s, &[8.8 / 8.0, 1.0]);
    }

    #[test]
    fn a_sender_serves_its_shortest_message_first() {
        let s = slowdowns(&[1000, 10_000], &[(0, 0, 1, 1), (0, 0, 2, 0)]);
        assert_close(&s, &[8.8 / 8.0, 1.0]);
    }

    #[test]
    fn disjoint_pairs_do_not_wait_for_each_other() {
        let s = slowdowns(&[1000, 10_000], &[(0, 0, 1, 1), (0, 2, 3, 0)]);
        assert_close(&s, &[1.0, 1.0]);
    }

    #[test]
    fn a_waiting_message_reserves_nothing() {
        // 0->1 (1 KB) holds sender 0, so 0->2 (5 KB) waits; 3->2 (10 KB) ranks below 0->2
        // yet takes receiver 2 meanwhile. At 0.8 us 0->2 preempts it there (5,000 B left
        // against 9,000): 0->2 ends at 4.8 us, 3->2 at 12 us.
        let sizes = [1000, 5000, 10_000];
        let s = slowdowns(&sizes, &[(0, 0, 1, 0), (0, 0, 2, 1), (0, 3, 2, 2)]);
        assert_close(&s, &[1.0, 4.8 / 4.0, 12.0 / 8.0]);
    }

    #[test]
    fn rank_is_bytes_left_not_size() {
        // At 6 us the 10 KB message has 2,500 B left: the 5 KB newcomer waits for it.
        let s = slowdowns(&[5000, 10_000], &[(0, 0, 2, 1), (6000, 1, 2, 0)]);
        assert_close(&s, &[1.0, 6.0 / 4.0]);
    }

    #[test]
    fn equal_messages_go_oldest_first() {
        let s = slowdowns(&[1000, 10_000], &[(0, 0, 2, 1), (0, 1, 2, 1)]);
        assert_close(&s, &[1.0, 2.0]);
    }

    #[test]
    fn an_arrival_at_a_completion_finds_the_link_free() {
        let s = slowdowns(&[1000, 10_000], &[(0, 0, 1, 1), (8000, 0, 1, 0)]);
        assert_close(&s, &[1.0, 1.0]);
    }
}
