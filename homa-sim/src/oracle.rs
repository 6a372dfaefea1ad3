//! An ideal scheduler to compare Homa with: the paper's "SRPT-Oracle", run on the very
//! messages a Homa run generated.
//!
//! Each message is a fluid flow at its sender's full link rate, with no headers, grants,
//! latency or switch queues. At every arrival and completion the oracle serves messages in
//! order of fewest bytes left (then oldest), each one only if neither its sender nor its
//! receiver already serves a message ahead of it: greedy SRPT matching on the host links, the
//! ideal of the pFabric and Homa papers. Slowdown = completion time / (size / link rate), so a
//! message that never waits has exactly 1.

use crate::report::Stats;

/// A message as the Homa run created it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arrival {
    pub(crate) at_ns: u64,
    pub(crate) src: u32,
    pub(crate) dst: u32,
    pub(crate) size_index: u32,
    pub(crate) measured: bool,
}

#[derive(Debug, Clone, Copy)]
struct Job {
    /// Picoseconds of transmission left at the link rate.
    left_ps: u64,
    arrived_ps: u64,
    /// Arrival order, so equal messages rank by age and the result never depends on sorting.
    seq: u32,
    src: u32,
    dst: u32,
    size_index: u32,
    measured: bool,
}

/// Runs `arrivals` (in time order) through the oracle and records the measured messages'
/// slowdowns in `stats`. `sizes` are the workload's sizes by index.
pub(crate) fn run(
    arrivals: &[Arrival],
    sizes: &[u64],
    hosts: usize,
    host_bps: u64,
    stats: &mut Stats,
) {
    let ps_per_byte = 8e12 / host_bps as f64;
    let work_ps: Vec<u64> = sizes.iter().map(|&s| (s as f64 * ps_per_byte).ceil() as u64).collect();
    let mut jobs: Vec<Job> = Vec::new();
    let mut served: Vec<usize> = Vec::new();
    let (mut src_busy, mut dst_busy) = (vec![false; hosts], vec![false; hosts]);
    let (mut now, mut next) = (0u64, 0usize);
    loop {
        while let Some(a) = arrivals.get(next).filter(|a| a.at_ns * 1000 <= now) {
            jobs.push(Job {
                left_ps: work_ps[a.size_index as usize],
                arrived_ps: a.at_ns * 1000,
                seq: next as u32,
                src: a.src,
                dst: a.dst,
                size_index: a.size_index,
                measured: a.measured,
            });
            next += 1;
        }
        // The matching only changes at arrivals and completions: served messages only move
        // ahead of the ones they block.
        jobs.sort_unstable_by_key(|j| (j.left_ps, j.arrived_ps, j.seq));
        served.clear();
        for (i, j) in jobs.iter().enumerate() {
            let (s, d) = (j.src as usize, j.dst as usize);
            if !src_busy[s] && !dst_busy[d] {
                (src_busy[s], dst_busy[d]) = (true, true);
                served.push(i);
            }
        }
        for &i in &served {
            let j = &jobs[i];
            (src_busy[j.src as usize], dst_busy[j.dst as usize]) = (false, false);
        }
        let first_done = served.iter().map(|&i| jobs[i].left_ps).min();
        let next_arrival = arrivals.get(next).map(|a| a.at_ns * 1000 - now);
        let step = match (first_done, next_arrival) {
            (None, None) => break,
            (Some(d), Some(a)) => d.min(a),
            (Some(d), None) => d,
            (None, Some(a)) => a,
        };
        for &i in &served {
            jobs[i].left_ps -= step;
        }
        now += step;
        jobs.retain(|j| {
            if j.left_ps > 0 {
                return true;
            }
            if j.measured {
                let ideal = work_ps[j.size_index as usize] as f64;
                stats.record(j.size_index as usize, (now - j.arrived_ps) as f64 / ideal);
            }
            false
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Workload;

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
                let arrivals: Vec<Arrival> = msgs
                    .iter()
                    .enumerate()
                    .map(|(i, &(at_ns, src, dst, size_index))| Arrival {
                        at_ns,
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
    fn a_blocked_message_does_not_block_the_next() {
        // 0->1 (short) blocks 0->2 (long); 3->2 (middle) is then free to use 2's link,
        // though the long message, which it would yield to, ranks below it anyway.
        let sizes = [1000, 5000, 10_000];
        let s = slowdowns(&sizes, &[(0, 0, 1, 0), (0, 0, 2, 2), (0, 3, 2, 1)]);
        // Short: alone. Middle: starts at once (4 us). Long: waits for the short at its
        // sender (0.8 us) and the middle at its receiver (4 us), then 8 us: ends at 12 us.
        assert_close(&s, &[1.0, 12.0 / 8.0, 1.0]);
    }
}
