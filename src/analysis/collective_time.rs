//! The time one step's collectives take over a link of bandwidth β and latency α, by the ring
//! and tree formulas (Thakur et al.; Patarasuk and Yuan), for N ranks and a collective of B
//! bytes (its whole tensor):
//!
//! | kind | ring | tree |
//! |---|---|---|
//! | all-reduce | 2(N−1)/N · B/β + 2(N−1) · α | 2 · B/β + 2⌈log₂N⌉ · α |
//! | all-gather, reduce-scatter | (N−1)/N · B/β + (N−1) · α | — |
//! | broadcast | B/β + (N−1) · α | B/β + ⌈log₂N⌉ · α |
//!
//! Latency is paid once per call. For an all-reduce the faster of the two is taken, as NCCL
//! picks between them. Compute and communication overlap or not: both bounds are given.

use crate::record::collectives::StepCollectives;

/// A link: bandwidth in bytes per second, latency in seconds (`--link GB/s,µs`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    pub bytes_per_s: f64,
    pub latency_s: f64,
}

impl Link {
    /// `--link 100,5`: 100 GB/s (10⁹ bytes per second) and 5 µs; units may be written
    /// (`100GB/s,5us`, `5µs`).
    pub fn parse(text: &str) -> anyhow::Result<Link> {
        let bad = || {
            anyhow::anyhow!(
                "--link {text}: give the link's bandwidth in GB/s and latency in µs, as 100,5 (100 GB/s, 5 µs)"
            )
        };
        let (bw, lat) = text.split_once(',').ok_or_else(bad)?;
        let num = |s: &str, units: &[&str]| -> anyhow::Result<f64> {
            let mut s = s.trim();
            for u in units {
                s = s.strip_suffix(u).unwrap_or(s).trim();
            }
            s.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(bad)
        };
        let gbps = num(bw, &["GB/s", "gb/s"])?;
        let us = num(lat, &["us", "µs"])?;
        if gbps <= 0.0 || us < 0.0 {
            anyhow::bail!(
                "--link {text}: the bandwidth must be above 0 GB/s and the latency at least 0 µs"
            );
        }
        Ok(Link {
            bytes_per_s: gbps * 1e9,
            latency_s: us * 1e-6,
        })
    }
}

impl Link {
    /// The ring all-reduce's latency and bandwidth fitted to `sizes` ((bytes, median seconds),
    /// `world` ranks): the latency from the smallest call (2(N−1) · α, its bytes' share taken
    /// off with the bandwidth of the largest), the bandwidth from the largest (the time left
    /// after its latency carries 2(N−1)/N · B). None without two sizes, or when the largest
    /// call took no longer than its latency.
    pub fn fit_all_reduce(world: usize, sizes: &[(u64, f64)]) -> Option<Link> {
        let n = world.max(2) as f64;
        Link::fit_ring(sizes, 2.0 * (n - 1.0) / n, 2.0 * (n - 1.0))
    }

    /// The same for a ring collective whose call of B bytes carries `share` · B per rank over
    /// `hops` latencies (an all-gather's or reduce-scatter's (N−1)/N and N−1).
    pub fn fit_ring(sizes: &[(u64, f64)], share: f64, hops: f64) -> Option<Link> {
        let (small, large) = (
            sizes.iter().min_by_key(|s| s.0)?,
            sizes.iter().max_by_key(|s| s.0)?,
        );
        if small.0 == large.0 {
            return None;
        }
        // Two equations, t = share · B / β + hops · α, at the smallest and largest size.
        let per_byte = (large.1 - small.1) / (share * (large.0 - small.0) as f64);
        let latency = (small.1 - share * small.0 as f64 * per_byte) / hops;
        (per_byte > 0.0).then(|| Link {
            bytes_per_s: 1.0 / per_byte,
            latency_s: latency.max(0.0),
        })
    }

    /// The link `peaks --collectives` measured, fitted to its medians (None when they do not
    /// fit).
    pub fn of_measured(p: &crate::torch::link::LinkPeaks) -> Option<Link> {
        let medians: Vec<(u64, f64)> = p.sizes.iter().map(|s| (s.bytes, s.median_s)).collect();
        Link::fit_all_reduce(p.world, &medians)
    }

    /// One ring all-reduce of `bytes` over `world` ranks on this link, seconds.
    pub fn ring_all_reduce_s(&self, world: usize, bytes: u64) -> f64 {
        let n = world.max(1) as f64;
        2.0 * (n - 1.0) / n * bytes as f64 / self.bytes_per_s + 2.0 * (n - 1.0) * self.latency_s
    }
}

/// The link per collective kind: the all-reduce's, and FSDP2's all-gather's and
/// reduce-scatter's where `peaks --collectives` measured them apart (a backend may run them at
/// another speed: gloo's all-gather is not its all-reduce); a kind without its own takes the
/// all-reduce's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Links {
    pub all_reduce: Link,
    pub all_gather: Option<Link>,
    pub reduce_scatter: Option<Link>,
}

impl Links {
    /// One link for every kind (`--link`).
    pub fn uniform(link: Link) -> Links {
        Links {
            all_reduce: link,
            all_gather: None,
            reduce_scatter: None,
        }
    }

    /// The links `peaks --collectives` measured, each fitted to its own calls (None when the
    /// all-reduce's do not fit).
    pub fn of_measured(p: &crate::torch::link::LinkPeaks) -> Option<Links> {
        let n = p.world.max(2) as f64;
        let ring = |v: &[crate::torch::link::LinkSize]| {
            let medians: Vec<(u64, f64)> = v.iter().map(|s| (s.bytes, s.median_s)).collect();
            Link::fit_ring(&medians, (n - 1.0) / n, n - 1.0)
        };
        Some(Links {
            all_reduce: Link::of_measured(p)?,
            all_gather: ring(&p.all_gather),
            reduce_scatter: ring(&p.reduce_scatter),
        })
    }

    /// FSDP2's own links where measured, as `estimate` says them after the all-reduce's:
    /// "; all-gather 0.67 GB/s, 194.5 µs; reduce-scatter 0.46 GB/s, 180.5 µs", else "".
    pub fn others(&self) -> String {
        [
            ("all-gather", self.all_gather),
            ("reduce-scatter", self.reduce_scatter),
        ]
        .into_iter()
        .filter_map(|(kind, l)| {
            l.map(|l| {
                format!(
                    "; {kind} {:.2} GB/s, {:.1} µs",
                    l.bytes_per_s / 1e9,
                    l.latency_s * 1e6
                )
            })
        })
        .collect()
    }

    fn for_kind(&self, kind: &str) -> Link {
        match kind {
            "all_gather" => self.all_gather,
            "reduce_scatter" => self.reduce_scatter,
            _ => None,
        }
        .unwrap_or(self.all_reduce)
    }
}

/// One kind's time in a step, seconds, and the formula used.
#[derive(Clone, Debug, PartialEq)]
pub struct KindTime {
    pub kind: String,
    pub seconds: f64,
    pub formula: &'static str,
}

/// Each kind's time over its link, over the ranks of its group (`world` when the count does not
/// say).
pub fn step_times(c: &StepCollectives, world: usize, links: &Links) -> Vec<KindTime> {
    c.iter()
        .map(|(kind, k)| {
            let link = links.for_kind(kind);
            let (bw, a) = (link.bytes_per_s, link.latency_s);
            let group = k.group_or(world);
            let n = group.max(1) as f64;
            let log2n = n.log2().ceil();
            let (b, calls) = (k.bytes as f64, k.calls as f64);
            let (seconds, formula) = match kind.as_str() {
                "all_reduce" => {
                    let ring = 2.0 * (n - 1.0) / n * b / bw + 2.0 * (n - 1.0) * a * calls;
                    let tree = 2.0 * b / bw + 2.0 * log2n * a * calls;
                    if ring <= tree {
                        (ring, "ring")
                    } else {
                        (tree, "tree")
                    }
                }
                "all_gather" | "reduce_scatter" => {
                    ((n - 1.0) / n * b / bw + (n - 1.0) * a * calls, "ring")
                }
                _ => (b / bw + log2n * a * calls, "tree"),
            };
            KindTime {
                kind: kind.clone(),
                seconds: if group <= 1 { 0.0 } else { seconds },
                formula,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::collectives::CollectiveCount;

    #[test]
    fn ring_all_gather_and_all_reduce_by_the_formulas() {
        let link = Link::parse("100GB/s, 5us").unwrap();
        assert_eq!(link.bytes_per_s, 1e11);
        assert!((link.latency_s - 5e-6).abs() < 1e-15);
        let mut c = StepCollectives::new();
        c.insert(
            "all_gather".into(),
            CollectiveCount {
                calls: 4,
                bytes: 4_000_000_000,
                group: None,
            },
        );
        c.insert(
            "all_reduce".into(),
            CollectiveCount {
                calls: 1,
                bytes: 1_000_000_000,
                group: None,
            },
        );
        let t = step_times(&c, 4, &Links::uniform(link));
        // 3/4 · 4 GB / 100 GB/s + 3 · 5 µs · 4 calls.
        assert!((t[0].seconds - (0.03 + 60e-6)).abs() < 1e-12, "{t:?}");
        // Ring: 2 · 3/4 · 1 GB / 100 GB/s + 2 · 3 · 5 µs = 15.03 ms; tree 20.02 ms.
        assert!((t[1].seconds - (0.015 + 30e-6)).abs() < 1e-12, "{t:?}");
        assert_eq!(t[1].formula, "ring");
        assert!(Link::parse("fast").is_err());
        assert!(Link::parse("0,5").is_err());
        assert!(step_times(&c, 1, &Links::uniform(link))
            .iter()
            .all(|k| k.seconds == 0.0));
        // A tensor-parallel all-reduce over 2 of the job's 4 ranks: 2 · 1/2 · 1 GB / 100 GB/s
        // + 2 · 1 · 5 µs.
        c.get_mut("all_reduce").unwrap().group = Some(2);
        let t = step_times(&c, 4, &Links::uniform(link));
        assert!((t[1].seconds - (0.01 + 10e-6)).abs() < 1e-12, "{t:?}");
    }

    #[test]
    fn a_link_fitted_to_its_own_formula_comes_back() {
        let link = Link::parse("5,40").unwrap();
        let sizes: Vec<(u64, f64)> = [8u64, 1 << 20, 64 << 20]
            .iter()
            .map(|&b| (b, link.ring_all_reduce_s(2, b)))
            .collect();
        let fit = Link::fit_all_reduce(2, &sizes).unwrap();
        assert!((fit.bytes_per_s / 5e9 - 1.0).abs() < 1e-9, "{fit:?}");
        assert!((fit.latency_s / 40e-6 - 1.0).abs() < 1e-9, "{fit:?}");
        assert!(Link::fit_all_reduce(2, &sizes[..1]).is_none());
        // An all-gather's own link, used for its kind only.
        let gather = Link::parse("1,100").unwrap();
        let calls: Vec<(u64, f64)> = [8u64, 64 << 20]
            .iter()
            .map(|&b| (b, 0.5 * b as f64 / 1e9 + 100e-6))
            .collect();
        let fit = Link::fit_ring(&calls, 0.5, 1.0).unwrap();
        assert!(
            (fit.bytes_per_s / gather.bytes_per_s - 1.0).abs() < 1e-9,
            "{fit:?}"
        );
        let links = Links {
            all_reduce: link,
            all_gather: Some(fit),
            reduce_scatter: None,
        };
        assert_eq!(links.for_kind("all_gather"), fit);
        assert_eq!(links.for_kind("reduce_scatter"), link);
    }
}
