//! `anycloud credentials new NAME` on a terminal without `--provider`: asks for the provider and
//! its keys (secret values typed without echo), shows what it will save (never the secret), asks
//! to confirm, saves through the same request as the flags, and follows the verification.
//!
//! Why a wizard at all: the flags put a secret in the shell's history and in `ps` unless a person
//! knows to export variables first; typed at a hidden prompt it goes nowhere but the request.
//! Why it refuses without a terminal: a script that forgot `--provider` would otherwise hang on
//! a prompt nobody sees, so it gets a stable code (`PROVIDER_REQUIRED`) and the flags to use.
//!
//! The questions ([`ask_answers`]) run against a [`Prompter`]: the real terminal ([`TtyPrompter`])
//! or, in the unit tests, a script. Ctrl-C or the end of input at any prompt stops it before
//! anything is sent, with the terminal's echo as it was.

use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};

use anycloud_workflows::cloud::ProviderKind;
use anycloud_workflows::providers::gcp::ServiceAccountKey;
use anycloud_workflows::providers::sim_settings::{LIMITS, SimSettings};
use anycloud_workflows::wire::{CredentialShown, NewCredential};

use super::credentials::{self, NewArgs};
use crate::client::Client;
use crate::exit::{BAD_INPUT, CliError, CliResult, ENDED_OTHERWISE, INTERRUPTED};
use crate::terminal::EchoOff;

/// The region an AWS credential's verification call goes to unless the person names another.
const DEFAULT_AWS_REGION: &str = "us-east-1";

/// Why the questions stopped before every answer was in.
#[derive(Debug)]
pub(crate) enum Stop {
    /// Ctrl-C (SIGINT).
    Interrupted,
    /// The input ended (Ctrl-D at an empty prompt, or a closed terminal).
    EndOfInput,
    /// The terminal could not be read or written.
    Terminal(String),
}

/// Whether the terminal shows what is typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Echo {
    /// Shown as typed (a key id, a region, a path).
    Shown,
    /// Not shown (a secret access key).
    Hidden,
}

/// Where the wizard asks its questions: the person's terminal, or a script in the unit tests.
pub(crate) trait Prompter {
    /// Shows a line (why an answer was refused, the summary).
    fn tell(&mut self, line: &str) -> Result<(), Stop>;
    /// Shows `prompt` and reads one line, without its line ending.
    async fn ask(&mut self, prompt: &str, echo: Echo) -> Result<String, Stop>;
}

/// Asks until `check` takes the answer (trimmed); each refusal is told with its reason.
pub(crate) async fn ask_until<P: Prompter, T>(
    prompter: &mut P,
    prompt: &str,
    echo: Echo,
    check: impl Fn(&str) -> Result<T, String>,
) -> Result<T, Stop> {
    loop {
        let answer = prompter.ask(prompt, echo).await?;
        match check(answer.trim()) {
            Ok(value) => return Ok(value),
            Err(why) => prompter.tell(&format!("  {why}"))?,
        }
    }
}

/// Asks a yes-or-no question whose empty answer is yes.
pub(crate) async fn confirm<P: Prompter>(prompter: &mut P, question: &str) -> Result<bool, Stop> {
    ask_until(prompter, &format!("{question} [Y/n]: "), Echo::Shown, |answer| {
        match answer.to_ascii_lowercase().as_str() {
            "" | "y" | "yes" => Ok(true),
            "n" | "no" => Ok(false),
            other => Err(format!("`{other}` is neither yes nor no; type y or n")),
        }
    })
    .await
}

/// What the person answered: one provider's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answers {
    /// A static AWS access key.
    Aws {
        /// The access key id (not secret; shown shortened).
        access_key_id: String,
        /// The secret access key (never shown).
        secret_access_key: String,
        /// The region of the verification call.
        region: String,
    },
    /// A GCP service-account key file, already read and checked.
    Gcp {
        /// Where it was read from.
        path: PathBuf,
        /// Its JSON, sent as it is.
        json: String,
        /// The account it is a key of.
        client_email: String,
        /// The project it names.
        project_id: String,
    },
    /// An account of the simulated cloud.
    Sim(SimSettings),
}

impl Answers {
    /// What will be saved, as label and value lines: never the secret.
    pub(crate) fn summary(&self, name: &str) -> Vec<(&'static str, String)> {
        let mut lines = vec![("name", name.to_owned())];
        match self {
            Self::Aws { access_key_id, region, .. } => lines.extend([
                ("provider", "aws".to_owned()),
                ("access key id", credentials::shorten_key_id(access_key_id)),
                ("secret access key", "(hidden)".to_owned()),
                ("region", region.clone()),
            ]),
            Self::Gcp { path, client_email, project_id, .. } => lines.extend([
                ("provider", "gcp".to_owned()),
                ("key file", path.display().to_string()),
                ("client_email", client_email.clone()),
                ("project", project_id.clone()),
            ]),
            Self::Sim(settings) => lines.extend([
                ("provider", "sim".to_owned()),
                ("call latency", format!("{} ms", settings.latency_ms)),
                ("VM boot time", format!("{} ms", settings.boot_ms)),
            ]),
        }
        lines
    }

    /// The provider's name.
    pub(crate) fn provider(&self) -> ProviderKind {
        match self {
            Self::Aws { .. } => ProviderKind::Aws,
            Self::Gcp { .. } => ProviderKind::Gcp,
            Self::Sim(_) => ProviderKind::Sim,
        }
    }

    /// The request the flags would have made: `POST /v1/credentials`.
    pub(crate) fn into_request(self, name: &str, endpoint: Option<String>) -> NewCredential {
        let mut request = NewCredential {
            name: name.to_owned(),
            provider: self.provider().as_str().to_owned(),
            endpoint,
            ..NewCredential::default()
        };
        match self {
            Self::Aws { access_key_id, secret_access_key, region } => {
                request.access_key_id = Some(access_key_id);
                request.secret_access_key = Some(secret_access_key);
                request.region = Some(region);
            }
            Self::Gcp { json, .. } => request.service_account_json = Some(json),
            Self::Sim(settings) => request.sim = Some(settings),
        }
        request
    }
}

/// A provider's name as typed at the prompt.
pub(crate) fn parse_provider(answer: &str) -> Result<ProviderKind, String> {
    if answer.is_empty() {
        return Err("type the provider's name: aws, gcp or sim".into());
    }
    answer.to_ascii_lowercase().parse::<ProviderKind>().map_err(|_| {
        format!(
            "`{}` is not a provider Anycloud knows; type aws (Amazon EC2), gcp (Google Compute Engine) or sim \
             (the local simulated cloud)",
            anycloud_workflows::names::shown(answer)
        )
    })
}

/// An AWS access key id: letters and digits (`AKIA...`), as IAM issues them.
pub(crate) fn parse_access_key_id(answer: &str) -> Result<String, String> {
    if answer.is_empty() {
        return Err("the access key id is required (IAM > Users > Security credentials, e.g. AKIA...)".into());
    }
    if !answer.bytes().all(|b| b.is_ascii_alphanumeric()) || answer.len() > 128 {
        return Err(format!(
            "`{}` is not an AWS access key id: it has only letters and digits, like AKIAIOSFODNN7EXAMPLE",
            anycloud_workflows::names::shown(answer)
        ));
    }
    Ok(answer.to_owned())
}

/// An AWS secret access key: printable and without spaces (it is never echoed, so the reason
/// never repeats it).
pub(crate) fn parse_secret_access_key(answer: &str) -> Result<String, String> {
    if answer.is_empty() {
        return Err("the secret access key is required (it is shown once, when the access key is created)".into());
    }
    if !answer.bytes().all(|b| b.is_ascii_graphic()) || answer.len() > 1024 {
        return Err(
            "that is not an AWS secret access key: it has no spaces or control characters; paste it again".into()
        );
    }
    Ok(answer.to_owned())
}

/// An AWS region name such as `eu-west-1`; empty takes [`DEFAULT_AWS_REGION`].
pub(crate) fn parse_region(answer: &str) -> Result<String, String> {
    if answer.is_empty() {
        return Ok(DEFAULT_AWS_REGION.to_owned());
    }
    let shaped = answer.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && answer.contains('-')
        && answer.len() <= 32;
    if !shaped {
        return Err(format!(
            "`{}` is not an AWS region name; type one like us-east-1 or eu-west-1",
            anycloud_workflows::names::shown(answer)
        ));
    }
    Ok(answer.to_owned())
}

/// A path as typed: a leading `~/` is the home directory, as a shell would read it.
fn typed_path(answer: &str) -> PathBuf {
    match (answer.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => Path::new(&home).join(rest),
        _ => PathBuf::from(answer),
    }
}

/// Reads and checks a service-account key file: JSON of `type` `service_account` with its
/// `client_email`, `private_key` and `project_id`.
pub(crate) fn read_service_account(answer: &str) -> Result<Answers, String> {
    if answer.is_empty() {
        return Err(
            "type the path of the service-account key file (a JSON key from IAM > Service accounts > Keys)".into()
        );
    }
    let path = typed_path(answer);
    let bytes = credentials::read_key_file(&path)?;
    let json =
        String::from_utf8(bytes).map_err(|_| format!("{} is not a JSON key file (not UTF-8)", path.display()))?;
    let key = ServiceAccountKey::parse(&json).map_err(|why| format!("{}: {why}", path.display()))?;
    if key.client_email.trim().is_empty() {
        return Err(format!("{}: the key has no client_email; download a JSON key from IAM", path.display()));
    }
    Ok(Answers::Gcp { path, client_email: key.client_email, project_id: key.project_id, json })
}

/// A whole number of milliseconds from 0 to `max`; empty takes `default`.
pub(crate) fn parse_millis(answer: &str, default: u64, max: u64) -> Result<u64, String> {
    if answer.is_empty() {
        return Ok(default);
    }
    match answer.parse::<u64>() {
        Ok(value) if value <= max => Ok(value),
        _ => Err(format!(
            "`{}` is not a number of milliseconds from 0 to {max}",
            anycloud_workflows::names::shown(answer)
        )),
    }
}

/// Asks for the provider, then for each of its keys; a refused answer is asked again.
pub(crate) async fn ask_answers<P: Prompter>(prompter: &mut P) -> Result<Answers, Stop> {
    let provider = ask_until(prompter, "Provider (aws, gcp, sim): ", Echo::Shown, parse_provider).await?;
    match provider {
        ProviderKind::Aws => {
            let access_key_id = ask_until(prompter, "AWS access key id: ", Echo::Shown, parse_access_key_id).await?;
            let secret_access_key = ask_until(
                prompter,
                "AWS secret access key (hidden as you type): ",
                Echo::Hidden,
                parse_secret_access_key,
            )
            .await?;
            let region =
                ask_until(prompter, &format!("AWS region [{DEFAULT_AWS_REGION}]: "), Echo::Shown, parse_region).await?;
            Ok(Answers::Aws { access_key_id, secret_access_key, region })
        }
        ProviderKind::Gcp => {
            ask_until(prompter, "GCP service-account key file (path to its JSON): ", Echo::Shown, read_service_account)
                .await
        }
        ProviderKind::Sim => {
            let defaults = SimSettings::default();
            let latency_ms = ask_until(
                prompter,
                &format!("Simulated call latency in ms [{}]: ", defaults.latency_ms),
                Echo::Shown,
                |answer| parse_millis(answer, defaults.latency_ms, LIMITS.latency_ms),
            )
            .await?;
            let boot_ms = ask_until(
                prompter,
                &format!("Simulated VM boot time in ms [{}]: ", defaults.boot_ms),
                Echo::Shown,
                |answer| parse_millis(answer, defaults.boot_ms, LIMITS.boot_ms),
            )
            .await?;
            Ok(Answers::Sim(SimSettings { latency_ms, boot_ms, ..defaults }))
        }
    }
}

/// Shows what will be saved and asks to go on.
pub(crate) async fn confirm_summary<P: Prompter>(
    prompter: &mut P,
    name: &str,
    answers: &Answers,
) -> Result<bool, Stop> {
    prompter.tell("")?;
    prompter.tell(&format!("Credential `{name}` will be saved on the active API:"))?;
    let lines = answers.summary(name);
    let width = lines.iter().map(|(label, _)| label.len()).max().unwrap_or(0);
    for (label, value) in &lines {
        prompter.tell(&format!("  {label:<width$}  {value}"))?;
    }
    confirm(prompter, "Save it and verify it with the provider?").await
}

/// The refusal when there is nobody to ask: a script that forgot `--provider`.
fn provider_required(name: &str) -> CliError {
    CliError::new(
        BAD_INPUT,
        "PROVIDER_REQUIRED",
        format!(
            "credential `{name}`: --provider is required when standard input is not a terminal (without it the \
             command asks on a terminal). In a script, give the keys through flags and environment variables: \
             `--provider aws` with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY set (and --region R), \
             `--provider gcp --service-account-file FILE` or GOOGLE_APPLICATION_CREDENTIALS=FILE, \
             `--provider aws|gcp --machine-identity` to act as the API's own machine, or `--provider sim`"
        ),
    )
}

/// The error a stop becomes: nothing was saved.
fn stopped(name: &str, stop: Stop) -> CliError {
    match stop {
        Stop::Interrupted => CliError::new(
            INTERRUPTED,
            "INTERRUPTED",
            format!("interrupted: credential `{name}` was not saved; run the command again to start over"),
        ),
        Stop::EndOfInput => CliError::new(
            INTERRUPTED,
            "INTERRUPTED",
            format!("the input ended before every answer: credential `{name}` was not saved"),
        ),
        Stop::Terminal(why) => CliError::new(
            BAD_INPUT,
            "TERMINAL",
            format!("{why}; credential `{name}` was not saved; give --provider and the keys as flags instead"),
        ),
    }
}

/// Runs the wizard: `credentials new NAME` without `--provider`.
pub async fn run(args: NewArgs, json: bool) -> CliResult {
    let name = args.name.clone();
    let flags = credentials::key_flags_given(&args);
    if !flags.is_empty() {
        return Err(CliError::new(
            BAD_INPUT,
            "PROVIDER_REQUIRED",
            format!(
                "credential `{name}`: {} {} --provider; add --provider aws|gcp|sim, or leave {} out and answer the \
                 questions the command asks on a terminal",
                flags.join(", "),
                if flags.len() == 1 { "needs" } else { "need" },
                if flags.len() == 1 { "it" } else { "them" },
            ),
        ));
    }
    if !std::io::stdin().is_terminal() {
        return Err(provider_required(&name));
    }
    anycloud_workflows::names::check_dns_label("credential", &name).map_err(CliError::bad_input)?;
    // Before any secret is typed: is there an API to save it on, and is the name free?
    let client = Client::active()?;
    match client.get::<CredentialShown>(&format!("/v1/credentials/{name}")).await {
        Ok(_) => {
            return Err(CliError::new(
                BAD_INPUT,
                "CREDENTIAL_EXISTS",
                format!(
                    "credential `{name}` already exists; choose another name, or delete it first \
                     (`anycloud credentials delete {name}`)"
                ),
            ));
        }
        Err(err) if err.error_code == "CREDENTIAL_NOT_FOUND" => {}
        Err(err) => return Err(err),
    }
    let mut prompter = TtyPrompter::open().map_err(|stop| stopped(&name, stop))?;
    let answers = ask_answers(&mut prompter).await.map_err(|stop| stopped(&name, stop))?;
    // `--endpoint` is the one flag the wizard takes (a private endpoint, a local peer): a sim
    // account has none.
    credentials::refuse_foreign_flags(&args, answers.provider())?;
    if !confirm_summary(&mut prompter, &name, &answers).await.map_err(|stop| stopped(&name, stop))? {
        return Err(CliError::new(
            ENDED_OTHERWISE,
            "CANCELLED",
            format!("credential `{name}` was not saved: you answered no"),
        ));
    }
    let provider = answers.provider().as_str();
    let request = answers.into_request(&name, args.endpoint);
    let saved = credentials::save(&client, &request).await?;
    let run = saved.workflow_id;
    tokio::select! {
        result = credentials::follow_verification(&client, &saved, provider, true, json) => result,
        () = prompter.interrupted() => Err(CliError::new(
            INTERRUPTED,
            "INTERRUPTED",
            format!(
                "stopped following: credential `{name}` is saved and its verification goes on; follow it with \
                 `anycloud workflow inspect {run} --follow`, or see `anycloud credentials list`"
            ),
        )),
    }
}

/// The person's terminal: prompts to `/dev/tty` (stderr when it cannot be opened), answers
/// from standard input, Ctrl-C seen as SIGINT.
pub(crate) struct TtyPrompter {
    /// Where prompts go: never standard output, which `--json` keeps for the answer.
    out: Box<dyn std::io::Write + Send>,
    /// SIGINT, caught from the start so that none is missed between two prompts.
    interrupts: tokio::signal::unix::Signal,
}

impl TtyPrompter {
    /// Catches SIGINT and opens the terminal for the prompts.
    fn open() -> Result<Self, Stop> {
        let interrupts = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .map_err(|err| Stop::Terminal(format!("catching Ctrl-C: {err}")))?;
        let out: Box<dyn std::io::Write + Send> = match std::fs::OpenOptions::new().write(true).open("/dev/tty") {
            Ok(tty) => Box::new(tty),
            Err(_) => Box::new(std::io::stderr()),
        };
        Ok(Self { out, interrupts })
    }

    /// Resolves at the next Ctrl-C.
    async fn interrupted(&mut self) {
        self.interrupts.recv().await;
    }

    /// Writes to the terminal.
    fn write(&mut self, text: &str) -> Result<(), Stop> {
        self.out
            .write_all(text.as_bytes())
            .and_then(|()| self.out.flush())
            .map_err(|err| Stop::Terminal(format!("writing to the terminal: {err}")))
    }
}

impl Prompter for TtyPrompter {
    fn tell(&mut self, line: &str) -> Result<(), Stop> {
        self.write(&format!("{line}\n"))
    }

    async fn ask(&mut self, prompt: &str, echo: Echo) -> Result<String, Stop> {
        // Off before the prompt shows, so that nothing typed after it is echoed; dropped,
        // whatever happens next, before this returns: the echo comes back.
        let hidden = match echo {
            Echo::Hidden => Some(EchoOff::start().map_err(Stop::Terminal)?),
            Echo::Shown => None,
        };
        self.write(prompt)?;
        // A blocked read cannot be cancelled: it runs on a thread of its own, which the process
        // leaves behind if Ctrl-C comes first (a runtime's blocking pool would wait for it).
        let (sender, answer) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let read = std::io::stdin().read_line(&mut line).map(|count| (count, line));
            let _ = sender.send(read);
        });
        let read = tokio::select! {
            read = answer => read,
            _ = self.interrupts.recv() => {
                drop(hidden);
                let _ = self.write("\n");
                return Err(Stop::Interrupted);
            }
        };
        drop(hidden);
        match read {
            Ok(Ok((0, _))) => {
                let _ = self.write("\n");
                Err(Stop::EndOfInput)
            }
            Ok(Ok((_, line))) => Ok(line.trim_end_matches(['\n', '\r']).to_owned()),
            Ok(Err(err)) => Err(Stop::Terminal(format!("reading the terminal: {err}"))),
            Err(_) => Err(Stop::Terminal("reading the terminal: the reader stopped".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// A person who types these lines, then presses Ctrl-C (`None`) or stops typing (end of list).
    struct Script {
        answers: VecDeque<Option<String>>,
        /// Everything shown, prompts marked with their echo.
        shown: Vec<String>,
    }

    impl Script {
        fn new(answers: &[Option<&str>]) -> Self {
            Self { answers: answers.iter().map(|answer| answer.map(str::to_owned)).collect(), shown: Vec::new() }
        }

        fn prompts(&self) -> Vec<&str> {
            self.shown.iter().filter_map(|line| line.strip_prefix("? ")).collect()
        }
    }

    impl Prompter for Script {
        fn tell(&mut self, line: &str) -> Result<(), Stop> {
            self.shown.push(line.to_owned());
            Ok(())
        }

        async fn ask(&mut self, prompt: &str, echo: Echo) -> Result<String, Stop> {
            self.shown.push(format!("? {prompt}{}", if echo == Echo::Hidden { "(hidden)" } else { "" }));
            match self.answers.pop_front() {
                Some(Some(answer)) => Ok(answer),
                Some(None) => Err(Stop::Interrupted),
                None => Err(Stop::EndOfInput),
            }
        }
    }

    fn run<T>(future: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread().build().unwrap_or_else(|err| panic!("{err}")).block_on(future)
    }

    #[test]
    fn aws_asks_each_key_hides_the_secret_and_asks_again_after_a_wrong_provider() {
        let mut script = Script::new(&[
            Some("azure"),
            Some(" AWS "),
            Some("AKIA 123"),
            Some("AKIAIOSFODNN7EXAMPLE"),
            Some(""),
            Some("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
            Some(""),
        ]);
        let answers = run(ask_answers(&mut script)).unwrap_or_else(|_| panic!("stopped: {:?}", script.shown));
        assert_eq!(
            answers,
            Answers::Aws {
                access_key_id: "AKIAIOSFODNN7EXAMPLE".into(),
                secret_access_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
                region: "us-east-1".into(),
            }
        );
        assert_eq!(
            script.prompts(),
            [
                "Provider (aws, gcp, sim): ",
                "Provider (aws, gcp, sim): ",
                "AWS access key id: ",
                "AWS access key id: ",
                "AWS secret access key (hidden as you type): (hidden)",
                "AWS secret access key (hidden as you type): (hidden)",
                "AWS region [us-east-1]: ",
            ]
        );
        let told: Vec<&String> = script.shown.iter().filter(|line| line.starts_with("  ")).collect();
        assert!(told[0].contains("`azure` is not a provider Anycloud knows; type aws"), "{told:?}");
        assert!(told[1].contains("`AKIA 123` is not an AWS access key id"), "{told:?}");
        assert!(told[2].contains("the secret access key is required"), "{told:?}");
    }

    #[test]
    fn the_summary_shows_the_key_id_shortened_and_never_the_secret() {
        let answers = Answers::Aws {
            access_key_id: "AKIAIOSFODNN7EXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
            region: "eu-west-1".into(),
        };
        let mut script = Script::new(&[Some("maybe"), Some("y")]);
        assert!(run(confirm_summary(&mut script, "team-aws", &answers)).unwrap_or_else(|_| panic!("stopped")));
        let shown = script.shown.join("\n");
        assert!(!shown.contains("wJalrXUtnFEMI"), "{shown}");
        for words in ["name               team-aws", "provider           aws", "AKIA…MPLE", "(hidden)", "eu-west-1"] {
            assert!(shown.contains(words), "lacks {words:?}:\n{shown}");
        }
        assert!(shown.contains("`maybe` is neither yes nor no"), "{shown}");
        let request = answers.into_request("team-aws", None);
        assert_eq!(request.provider, "aws");
        assert_eq!(request.secret_access_key.as_deref(), Some("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"));
        assert_eq!(request.region.as_deref(), Some("eu-west-1"));
    }

    #[test]
    fn a_gcp_key_file_is_read_and_checked_and_asked_again_when_wrong() {
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let adc = dir.path().join("adc.json");
        std::fs::write(&adc, r#"{"type":"authorized_user","client_id":"x"}"#).unwrap_or_else(|err| panic!("{err}"));
        let key = dir.path().join("key.json");
        let key_json = r#"{"type":"service_account","project_id":"acme-prod","client_email":"ci@acme-prod.iam.gserviceaccount.com","private_key":"-----BEGIN PRIVATE KEY-----\nMII\n-----END PRIVATE KEY-----\n"}"#;
        std::fs::write(&key, key_json).unwrap_or_else(|err| panic!("{err}"));
        let missing = dir.path().join("missing.json");
        let paths: Vec<String> = [&missing, &adc, &key].iter().map(|path| path.display().to_string()).collect();
        let mut script = Script::new(&[Some("gcp"), Some(&paths[0]), Some(&paths[1]), Some(&paths[2]), Some("no")]);
        let answers = run(ask_answers(&mut script)).unwrap_or_else(|_| panic!("stopped: {:?}", script.shown));
        let told: Vec<&String> = script.shown.iter().filter(|line| line.starts_with("  ")).collect();
        assert!(
            told[0].contains("reading the service-account key file") && told[0].contains("missing.json"),
            "{told:?}"
        );
        assert!(told[1].contains("of type `authorized_user`"), "{told:?}");
        let Answers::Gcp { client_email, project_id, json, .. } = &answers else { panic!("{answers:?}") };
        assert_eq!(client_email, "ci@acme-prod.iam.gserviceaccount.com");
        assert_eq!(project_id, "acme-prod");
        assert_eq!(json, key_json);
        assert!(!run(confirm_summary(&mut script, "team-gcp", &answers)).unwrap_or_else(|_| panic!("stopped")));
        let shown = script.shown.join("\n");
        assert!(shown.contains("client_email  ci@acme-prod.iam.gserviceaccount.com"), "{shown}");
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
    }

    #[test]
    fn sim_takes_its_defaults_and_checks_ranges() {
        let mut script = Script::new(&[Some("sim"), Some("60001"), Some("25"), Some("")]);
        let answers = run(ask_answers(&mut script)).unwrap_or_else(|_| panic!("stopped: {:?}", script.shown));
        assert_eq!(answers, Answers::Sim(SimSettings { latency_ms: 25, ..SimSettings::default() }));
        assert!(script.shown.iter().any(|line| line.contains("from 0 to 60000")), "{:?}", script.shown);
    }

    #[test]
    fn ctrl_c_and_the_end_of_input_stop_the_questions() {
        let mut script = Script::new(&[Some("aws"), Some("AKIAIOSFODNN7EXAMPLE"), None]);
        assert!(matches!(run(ask_answers(&mut script)), Err(Stop::Interrupted)));
        let mut script = Script::new(&[Some("sim")]);
        assert!(matches!(run(ask_answers(&mut script)), Err(Stop::EndOfInput)));
        let err = stopped("team", Stop::Interrupted);
        assert_eq!((err.code, err.error_code.as_str()), (INTERRUPTED, "INTERRUPTED"));
        assert!(err.message.contains("credential `team` was not saved"), "{}", err.message);
    }

    #[test]
    fn answers_are_checked_with_reasons() {
        assert!(parse_region("").is_ok_and(|region| region == "us-east-1"));
        assert!(parse_region("eu-west-1").is_ok());
        assert!(parse_region("Europe").unwrap_err().contains("not an AWS region name"));
        assert!(parse_secret_access_key("has space").unwrap_err().contains("no spaces"));
        assert!(parse_provider("").unwrap_err().contains("aws, gcp or sim"));
        assert_eq!(parse_provider("GCP"), Ok(ProviderKind::Gcp));
        assert_eq!(parse_millis("", 300, 10), Ok(300));
        assert!(parse_millis("-1", 300, 10).is_err());
    }
}
