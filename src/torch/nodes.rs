//! A data-parallel job across nodes (`sweep --slurm --nodes M`): each of the array task's M
//! Slurm tasks (`srun`, one per node) starts torchrun for its node's `world / M` ranks, and the
//! nodes meet at node 0 through torchrun's static rendezvous (`--master-addr`, `--master-port`,
//! `--node-rank`: node r holds global ranks r·n … r·n + n − 1, so global rank 0, which writes
//! every rank's Record, is on node 0). Which node this process is comes from Slurm's variables.

use crate::spec::Parallel;
use anyhow::{bail, Context};

/// This Slurm task's place in a job across nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// This node's rank (`SLURM_PROCID`; one task a node).
    pub rank: usize,
    /// The address of node 0 (`SLURM_LAUNCH_NODE_IPADDR`: where the batch script ran srun,
    /// the allocation's first node, which holds task 0).
    pub master_addr: String,
    /// The rendezvous port on node 0: one per Slurm job (20000 + `SLURM_JOB_ID` mod 10000),
    /// so array tasks that share a first node do not meet each other.
    pub master_port: u16,
}

/// The node this process is for `p`, or None for a job on one node.
pub fn this_node(p: &Parallel) -> anyhow::Result<Option<Node>> {
    this_node_from(p, &|k| std::env::var(k).ok())
}

fn this_node_from(
    p: &Parallel,
    var: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<Option<Node>> {
    if p.nodes <= 1 {
        return Ok(None);
    }
    let how = format!(
        "--nodes {}: a job across nodes runs as the Slurm tasks of `memscope sweep --slurm --nodes {0}`",
        p.nodes
    );
    let get = |k: &str| var(k).with_context(|| format!("{how}, which set {k}; it is not set here"));
    let number = |k: &str| -> anyhow::Result<usize> {
        let v = get(k)?;
        v.trim()
            .parse()
            .with_context(|| format!("{how}: {k}={v} is not a whole number"))
    };
    let (rank, tasks, job) = (
        number("SLURM_PROCID")?,
        number("SLURM_NTASKS")?,
        number("SLURM_JOB_ID")?,
    );
    if tasks != p.nodes {
        bail!(
            "{how}: this Slurm step has {tasks} tasks, one a node is {}",
            p.nodes
        );
    }
    Ok(Some(Node {
        rank,
        master_addr: get("SLURM_LAUNCH_NODE_IPADDR")?,
        master_port: 20000 + (job % 10000) as u16,
    }))
}

/// torchrun's flags for this node of the job (after `-m torch.distributed.run`).
pub fn torchrun_flags(p: &Parallel, node: Option<&Node>) -> Vec<String> {
    let mut a: Vec<String> = match node {
        None => vec!["--standalone".into()],
        Some(n) => vec![
            "--nnodes".into(),
            p.nodes.to_string(),
            "--node-rank".into(),
            n.rank.to_string(),
            "--master-addr".into(),
            n.master_addr.clone(),
            "--master-port".into(),
            n.master_port.to_string(),
        ],
    };
    a.push("--nproc-per-node".into());
    a.push(p.per_node().to_string());
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::ParallelPlan;

    fn job(nodes: usize) -> Parallel {
        Parallel {
            plan: ParallelPlan::Ddp,
            world: 4,
            tp: 1,
            nodes,
        }
    }

    #[test]
    fn one_node_is_standalone_and_two_meet_at_node_zero() {
        let none = |_: &str| None;
        assert_eq!(this_node_from(&job(1), &none).unwrap(), None);
        assert_eq!(
            torchrun_flags(&job(1), None),
            ["--standalone", "--nproc-per-node", "4"]
        );
        let env = |k: &str| {
            Some(match k {
                "SLURM_PROCID" => "1",
                "SLURM_NTASKS" => "2",
                "SLURM_JOB_ID" => "123457",
                "SLURM_LAUNCH_NODE_IPADDR" => "10.0.0.7",
                _ => return None,
            })
            .map(String::from)
        };
        let node = this_node_from(&job(2), &env).unwrap().unwrap();
        assert_eq!(
            torchrun_flags(&job(2), Some(&node)),
            [
                "--nnodes",
                "2",
                "--node-rank",
                "1",
                "--master-addr",
                "10.0.0.7",
                "--master-port",
                "23457",
                "--nproc-per-node",
                "2"
            ]
        );
    }

    #[test]
    fn outside_slurm_the_error_names_the_flag_and_the_variable() {
        let e = this_node_from(&job(2), &|_| None).unwrap_err().to_string();
        assert!(
            e.contains("--nodes 2") && e.contains("sweep --slurm --nodes 2"),
            "{e}"
        );
        assert!(e.contains("SLURM_PROCID"), "{e}");
        let three = |k: &str| {
            (k == "SLURM_NTASKS" || k == "SLURM_PROCID" || k == "SLURM_JOB_ID")
                .then(|| "3".to_string())
        };
        let e = this_node_from(&job(2), &three).unwrap_err().to_string();
        assert!(e.contains("3 tasks"), "{e}");
    }
}
