//! `--help` of the tool and of every subcommand, snapshotted: a refactor of the CLI must not change
//! what users read. Update deliberately with `INSTA_UPDATE=always cargo test --release --test help`.

use assert_cmd::Command;

const COMMANDS: &[&str] = &[
    "", "bench", "estimate", "models", "optimize", "sweep", "fit", "scaling", "leak", "analyze",
    "watch", "peaks", "roofline", "profile", "report", "compare", "diff", "worker",
];

fn help(command: &str) -> String {
    let mut cmd = Command::cargo_bin("memscope").unwrap();
    if !command.is_empty() {
        cmd.arg(command);
    }
    let out = cmd.arg("--help").output().unwrap();
    assert!(out.status.success(), "memscope {command} --help failed");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn help_of_every_subcommand_is_unchanged() {
    for c in COMMANDS {
        let name = if c.is_empty() { "memscope" } else { c };
        insta::assert_snapshot!(format!("help_{name}"), help(c));
    }
}
