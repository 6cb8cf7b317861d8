//! Every flag of every command that takes `--engine`, walked from its `--help`: with `--engine
//! torch` each is either honoured by the torch engine or refused naming the flag, never
//! silently ignored. A flag added to such a command fails this test until it is placed in one of
//! the lists below; each refusal is checked through the binary (no Python is started: the
//! refusals come before the engine would be).

mod support;
use support::memscope;

/// Flags every command has that say nothing about the engine's work.
const NEUTRAL: &[&str] = &["--help", "--quiet", "--engine", "--device"];

/// What the torch engine does with each flag of a command.
struct Command {
    name: &'static str,
    /// Honoured by the torch engine (the workload, the outputs, the sweep's and the verdict's
    /// own flags, which read the engine's Record as they read memscope's).
    honoured: &'static [&'static str],
    /// Refused with `--engine torch`: the arguments that exercise the refusal, and what the
    /// error must say.
    refused: &'static [(&'static str, &'static [&'static str], &'static str)],
}

const WORKLOAD: &[&str] = &[
    "--model",
    "--config",
    "--mode",
    "--batch",
    "--seq",
    "--dtype",
    "--warmup",
    "--steps",
    "--threads",
    "--seed",
    "--grad-accum",
    "--prompt-len",
    "--new-tokens",
    "--lr",
    "--force",
    "--data",
    "--data-dtype",
    "--attention",
    "--checkpoint",
    "--precision",
    // Read by the torch engine's build (`checkpointing.py`, FSDP2's wrap); refused without
    // --checkpoint or a sharded plan, naming the flag (tests/spec and test_policies.py).
    "--checkpoint-policy",
    "--fsdp-precision",
    "--reshard-after-forward",
    "--fsdp-offload",
    // Read by the pipeline's wrap (`pipeline.py`); refused without --parallel pp:P, naming the
    // flag (tests/parallel.rs) and exercised in test_pipeline.py.
    "--pp-schedule",
    "--micro-batches",
    "--pp-split",
];

const WEIGHTS: (&str, &[&str], &str) = (
    "--weights",
    &["--weights", "WEIGHTS"],
    "--weights WEIGHTS: the torch engine builds transformers' model with seeded random weights",
);
const FUSION_NONE: (&str, &[&str], &str) = (
    "--fusion",
    &["--fusion", "none"],
    "--fusion none is memscope's op-by-op candle path",
);

/// roofline and profile time every ATen op: torch.compile's fused kernels are not.
const FUSION_COMPILE: (&str, &[&str], &str) = (
    "--fusion",
    &["--fusion", "compile"],
    "--fusion compile: roofline and profile time every ATen op",
);

fn commands() -> Vec<Command> {
    let with = |extra: &'static [&'static str]| -> &'static [&'static str] {
        Box::leak(
            WORKLOAD
                .iter()
                .chain(extra)
                .copied()
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        )
    };
    vec![
        Command {
            name: "bench",
            honoured: with(&[
                "--json",
                "--csv",
                "--markdown",
                "--trace",
                "--nproc",
                "--parallel",
                "--timeout",
            ]),
            refused: &[WEIGHTS, FUSION_NONE],
        },
        Command {
            name: "leak",
            honoured: with(&[
                "--max-growth",
                "--max-growth-per-step",
                "--max-post-warmup-range",
                "--max-load",
                "--max-peak",
                "--budget",
                "--steps-per-hour",
                "--json",
                "--csv",
                "--markdown",
                "--record",
                "--trace",
            ]),
            refused: &[FUSION_NONE, WEIGHTS],
        },
        Command {
            name: "sweep",
            honoured: with(&[
                "--yes",
                "--nproc",
                "--parallel",
                "--memory-limit",
                "--timeout",
                "--jsonl",
                "--csv",
                "--markdown",
                "--trace",
                "--no-skip",
                "--slurm",
                "--work-dir",
                "--partition",
                "--gres",
                "--time",
                "--mem",
                "--nodes",
                "--max-parallel",
                "--sbatch-arg",
                "--attach",
                "--cancel-on-interrupt",
            ]),
            refused: &[FUSION_NONE, WEIGHTS],
        },
        Command {
            name: "fit",
            honoured: with(&[
                "--vary",
                "--memory-limit",
                "--timeout",
                "--max",
                "--json",
                "--nproc",
                "--parallel",
                "--predict",
            ]),
            refused: &[WEIGHTS, FUSION_NONE],
        },
        Command {
            name: "optimize",
            honoured: with(&[
                "--long-seq",
                "--memory-limit",
                "--max-batch",
                "--timeout",
                "--json",
                "--markdown",
            ]),
            refused: &[WEIGHTS],
        },
        Command {
            name: "estimate",
            // --threads picks the roofs the predicted step time reads.
            honoured: with(&[
                "--fits",
                "--json",
                "--nproc",
                "--parallel",
                "--link",
                "--profile",
                "--run-tokens",
            ]),
            refused: &[
                FUSION_NONE,
                (
                    "--weights",
                    &["--weights", "WEIGHTS"],
                    "--weights: estimate needs only the architecture",
                ),
                (
                    "--optimizer",
                    &["--optimizer", "sgd"],
                    "--optimizer sgd: the torch engine trains with PyTorch's fused AdamW",
                ),
                (
                    "--top",
                    &["--top", "3"],
                    "--top 3: the torch estimate prints categories",
                ),
            ],
        },
        Command {
            name: "peaks",
            honoured: &[
                "--threads",
                "--refresh",
                "--json",
                "--model",
                "--config",
                "--batch",
                "--seq",
                "--collectives",
                "--nproc",
            ],
            refused: &[(
                "--weights",
                &["--weights", "WEIGHTS"],
                "--weights: peaks times the model's shapes, not its weights",
            )],
        },
        Command {
            name: "roofline",
            honoured: with(&["--roofs", "--json", "--csv", "--markdown", "--svg"]),
            refused: &[WEIGHTS, FUSION_NONE, FUSION_COMPILE],
        },
        Command {
            name: "profile",
            honoured: with(&["--roofs", "--depth", "--json", "--csv", "--markdown"]),
            refused: &[WEIGHTS, FUSION_NONE, FUSION_COMPILE],
        },
    ]
}

/// The long flags `memscope CMD --help` lists.
fn flags_of(cmd: &str) -> Vec<String> {
    let out = memscope().args([cmd, "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut flags = Vec::new();
    for line in text.lines() {
        let t = line.trim_start();
        let t = t
            .strip_prefix("-")
            .filter(|r| r.chars().nth(1) == Some(','))
            .map_or(t, |r| r[2..].trim_start());
        if let Some(rest) = t.strip_prefix("--") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            if !name.is_empty() {
                flags.push(format!("--{name}"));
            }
        }
    }
    assert!(flags.len() > 5, "{cmd} --help lists no flags:\n{text}");
    flags
}

#[test]
fn every_flag_of_every_torch_command_is_honoured_or_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let weights = dir.path().join("w.safetensors");
    std::fs::write(&weights, b"").unwrap();
    let mut unplaced = Vec::new();
    for c in commands() {
        for flag in flags_of(c.name) {
            let placed = NEUTRAL.contains(&flag.as_str())
                || c.honoured.contains(&flag.as_str())
                || c.refused.iter().any(|(f, _, _)| *f == flag);
            if !placed {
                unplaced.push(format!("{} {flag}", c.name));
            }
        }
        for (flag, args, says) in c.refused {
            let args: Vec<String> = args
                .iter()
                .map(|a| {
                    if *a == "WEIGHTS" {
                        weights.display().to_string()
                    } else {
                        a.to_string()
                    }
                })
                .collect();
            let mut cmd = memscope();
            cmd.current_dir(dir.path())
                .args([c.name, "--engine", "torch", "--model", "tiny-gpt2", "-q"])
                .args(&args);
            if c.name == "fit" {
                cmd.args(["--memory-limit", "1GiB"]);
            }
            if c.name == "sweep" {
                cmd.args(["--batch", "1"]);
            }
            let out = cmd.output().unwrap();
            let all = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            let says = says.replace("WEIGHTS", &weights.display().to_string());
            let named = all.contains(&says)
                // leak and sweep read the weights file before the engine is chosen: an empty
                // one is refused there, naming the flag too.
                || (*flag == "--weights" && all.contains("--weights") && all.contains("0 bytes"));
            assert!(
                named && !out.status.success() || (c.name == "sweep" && all.contains(&says)),
                "{} --engine torch {}: not refused by name (exit {:?}):\n{all}",
                c.name,
                args.join(" "),
                out.status.code()
            );
        }
    }
    assert!(
        unplaced.is_empty(),
        "flags of commands that take --engine torch, neither honoured nor refused by the torch engine (place each in tests/torch_flags.rs, and refuse it in the engine if the engine cannot honour it): {unplaced:?}"
    );
}
