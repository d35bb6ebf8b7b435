//! The CLI habits people expect of a tool they live in: shell completions and a man page made
//! from the clap definitions (so they never drift from the commands), and a `--help` whose
//! command list reads at a glance, one short line a command, as gh's and kubectl's do.
//!
//! None of these talk to an API: each test runs the binary with an empty config directory and
//! no server, as on a machine that has just installed `anycloud`.

#![allow(clippy::unwrap_used)]

use std::process::{Command, Output};

use anycloud_tests::e2e::anycloud_bin;

/// `anycloud ARGS...` with an empty home and config directory: no API is known.
fn anycloud(args: &[&str]) -> Output {
    let home = tempfile::tempdir().unwrap();
    Command::new(anycloud_bin())
        .args(args)
        .env("HOME", home.path())
        .env("ANYCLOUD_CONFIG_DIR", home.path().join("config"))
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .output()
        .unwrap()
}

/// Its stdout, once it exited 0.
#[track_caller]
fn stdout_of(args: &[&str]) -> String {
    let output = anycloud(args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "`anycloud {}`: {stderr}", args.join(" "));
    String::from_utf8(output.stdout).unwrap()
}

/// The entries of a help text's `Commands:` section, one per line as printed.
fn command_lines(help: &str) -> Vec<&str> {
    help.lines().skip_while(|line| *line != "Commands:").skip(1).take_while(|line| !line.is_empty()).collect()
}

/// The command names of a help text's `Commands:` section, without `help`.
fn command_names(help: &str) -> Vec<String> {
    command_lines(help)
        .iter()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// What bash's completion function offers for `words` (the last one being completed), after
/// sourcing the script: the registration `complete -p anycloud` prints, then one offer a line.
fn bash_completes(script: &std::path::Path, words: &[&str]) -> (String, Vec<String>) {
    let program = format!(
        r#"source "$1" || exit 9
registration=$(complete -p anycloud) || exit 8
echo "$registration"
function=$(sed -n 's/.* -F \([^ ]*\) .*/\1/p' <<<"$registration")
COMP_WORDS=({words})
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
COMP_LINE="${{COMP_WORDS[*]}}"
COMP_POINT=${{#COMP_LINE}}
COMPREPLY=()
"$function" anycloud "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\n' "${{COMPREPLY[@]}}""#,
        words = words.join(" ")
    );
    let output =
        Command::new("bash").args(["--norc", "--noprofile", "-c", &program, "bash"]).arg(script).output().unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "bash failed:\n{stdout}\n{stderr}");
    let mut lines = stdout.lines();
    let registration = lines.next().unwrap_or_default().to_owned();
    (registration, lines.map(|line| line.trim_end().to_owned()).filter(|line| !line.is_empty()).collect())
}

#[test]
fn bash_loads_the_completion_and_completes_commands_and_flags() {
    let script = stdout_of(&["completions", "bash"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("anycloud.bash");
    std::fs::write(&file, &script).unwrap();

    let (registration, offers) = bash_completes(&file, &["anycloud", "clu"]);
    assert!(registration.starts_with("complete ") && registration.ends_with(" anycloud"), "{registration}");
    assert!(registration.contains(" -F "), "no completion function registered: {registration}");
    assert_eq!(offers, ["cluster"], "`anycloud clu` should complete to `cluster`");

    let (_, offers) = bash_completes(&file, &["anycloud", "cluster", "kube"]);
    assert_eq!(offers, ["kubeconfig"]);
    let (_, offers) = bash_completes(&file, &["anycloud", "wait", "--time"]);
    assert_eq!(offers, ["--timeout"]);
    let (_, offers) = bash_completes(&file, &["anycloud", "completions", "f"]);
    assert_eq!(offers, ["fish"]);
}

#[test]
fn zsh_fish_and_powershell_scripts_name_anycloud() {
    for (shell, marker) in
        [("zsh", "#compdef anycloud"), ("fish", "complete -c anycloud"), ("powershell", "'anycloud'")]
    {
        let script = stdout_of(&["completions", shell]);
        assert!(script.contains(marker), "`anycloud completions {shell}` lacks {marker:?}:\n{script}");
        assert!(script.contains("cluster") && script.contains("workflow"), "{shell}: commands missing");
    }
}

#[test]
fn an_unknown_shell_is_refused_as_bad_input() {
    let output = anycloud(&["completions", "tcsh"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Parser errors exit 3 in this CLI (docs/cli.md, "Exit codes"): 2 means "could not observe".
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("error[INVALID_ARGUMENT]"), "{stderr}");
    assert!(stderr.contains("'tcsh'") && stderr.contains("bash") && stderr.contains("powershell"), "{stderr}");
    assert!(output.stdout.is_empty());
}

#[test]
fn the_man_page_is_roff_and_names_every_command() {
    let page = stdout_of(&["man"]);
    // clap_mangen opens with roff's portable-apostrophe definition, then the title.
    assert!(page.starts_with(".ie \\n(.g .ds Aq \\(aq"), "not roff:\n{page}");
    assert!(page.contains("\n.TH anycloud 1 "), "no .TH title:\n{page}");
    assert!(page.contains("\n.SH SUBCOMMANDS"), "{page}");
    let names = command_names(&stdout_of(&["--help"]));
    assert!(names.len() > 10, "{names:?}");
    for name in names {
        // roff escapes the hyphen of `anycloud-NAME(1)`.
        assert!(page.contains(&format!("anycloud\\-{}", name.replace('-', "\\-"))), "man page lacks `{name}`");
    }
    assert!(!page.contains("sim\\-kube\\-proxy"), "a hidden command is in the man page");

    // The pages it names are there too, one level down and more.
    let page = stdout_of(&["man", "cluster", "create"]);
    assert!(page.contains("\n.TH anycloud-cluster-create 1 "), "{page}");
    assert!(page.contains("\\-\\-min\\-vms"), "{page}");
    let output = anycloud(&["man", "sim-kube-proxy"]);
    assert_eq!(output.status.code(), Some(3), "a hidden command has no page");
    assert!(String::from_utf8_lossy(&output.stderr).contains("is not a command"));
}

/// `anycloud --help`, and each command group's, lists every command in one short line: no
/// description wraps onto a second line, and every entry is under 100 columns.
#[test]
fn help_lists_each_command_in_one_short_line() {
    let top = stdout_of(&["--help"]);
    let mut checked = 0;
    let mut helps = vec![(String::new(), top.clone())];
    for name in command_names(&top) {
        let help = stdout_of(&[&name, "--help"]);
        if !command_lines(&help).is_empty() {
            helps.push((name, help));
        }
    }
    for (group, help) in &helps {
        let lines = command_lines(help);
        assert!(!lines.is_empty(), "`anycloud {group} --help` has no command list");
        for line in lines {
            let entry = line.strip_prefix("  ").unwrap_or_default();
            let mut words = entry.split_whitespace();
            let (name, about) = (words.next(), words.next());
            assert!(
                !entry.starts_with(' ') && name.is_some() && about.is_some(),
                "`anycloud {group} --help`: `{line}` is not `NAME  DESCRIPTION` on one line"
            );
            assert!(line.chars().count() < 100, "`anycloud {group} --help`: too long ({}):\n{line}", line.len());
            checked += 1;
        }
    }
    assert!(helps.len() >= 8 && checked > 40, "only {} lists, {checked} entries: is the parsing right?", helps.len());
}

/// The details a command's short line leaves out are in its own `--help`, with examples.
#[test]
fn a_command_s_own_help_has_the_details_and_examples() {
    let help = stdout_of(&["exec", "--help"]);
    assert!(help.starts_with("Run a command in a job's running container.\n\n"), "{help}");
    assert!(help.contains("stdin is forwarded unless it is a terminal"), "{help}");
    assert!(help.contains("Examples:\n  anycloud exec "), "{help}");
    let help = stdout_of(&["wait", "--help"]);
    assert!(help.contains("4 timeout, 5 the workflow stopped for a person"), "{help}");
    assert!(help.contains("Examples:\n  anycloud wait cluster/training"), "{help}");
}
