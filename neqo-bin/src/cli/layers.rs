//! Settings from three places, in this order of precedence: flags, environment variables
//! (`NEQO_SERVER_LISTEN` for `--listen`: the binary's prefix, then the long flag in upper
//! case with dashes as underscores) and a TOML file named by `--config` (its keys are the
//! long flag names: `listen = "127.0.0.1:4433"`, `alpn = ["h3", "perf"]`, `keylog = true`).
//! A repeatable flag's variable holds a comma-separated list
//! (`NEQO_SERVER_LISTEN="127.0.0.1:4433,[::1]:4433"`); on the command line and in the file its
//! values are never split, so a path with a comma goes there.
//!
//! The file's settings become flags placed before the user's, each only where neither a flag
//! nor a variable sets it, so one parser checks all three alike. Every key and value of the
//! file is checked first, so that a bad one is refused with the file, line and key named
//! rather than as a flag the user never typed; a bad value from a variable is refused with
//! the variable named. The file itself is read within bounds ([`read_config`]).

use std::{
    collections::{BTreeMap, BTreeSet},
    ffi::OsString,
    io::Read as _,
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::bail;
use clap::{
    ArgAction, ArgMatches, Command, FromArgMatches,
    error::{ContextKind, ContextValue, ErrorKind},
    parser::ValueSource,
};
use toml::{Spanned, Value};

/// The flag naming the file.
const CONFIG: &str = "config";

/// Flags that say what to do rather than how: no variable or key sets them (a file saying
/// `check-config = true` would keep every start from serving).
const ACTIONS: [&str; 1] = ["check_config"];

/// The most a config file may hold, read into memory whole: far more than any real one.
pub const MAX_CONFIG: u64 = 1 << 20;

/// Arguments that are settings, which a variable or a key may set: not `--help`, `--version`
/// or `-v` (`RUST_LOG` is its variable), nor positional arguments, nor [`ACTIONS`].
fn is_setting(arg: &clap::Arg) -> bool {
    arg.get_long().is_some()
        && !ACTIONS.contains(&arg.get_id().as_str())
        && !matches!(
            arg.get_action(),
            ArgAction::Help
                | ArgAction::HelpShort
                | ArgAction::HelpLong
                | ArgAction::Version
                | ArgAction::Count
        )
}

/// Repeatable settings whose values clap does not split (`--listen`, `--tls-cert`): their
/// variables hold comma-separated lists, split here. Clap splits the variables of those that
/// split their values anyway (`--alpn h3,perf`).
fn is_list(arg: &clap::Arg) -> bool {
    is_setting(arg)
        && matches!(arg.get_action(), ArgAction::Append)
        && arg.get_value_delimiter().is_none()
}

/// The variable that sets `long` for a binary whose variables start with `prefix`.
pub fn env_name(prefix: &str, long: &str) -> String {
    format!("{prefix}{}", long.to_uppercase().replace('-', "_"))
}

/// `cmd` with a variable for every setting.
pub fn with_env(cmd: Command, prefix: &str) -> Command {
    cmd.mut_args(|arg| {
        if is_setting(&arg) {
            let name = env_name(prefix, arg.get_long().expect("a setting has a long name"));
            arg.env(name)
        } else {
            arg
        }
    })
}

/// The variable of `arg` and its value, if it is set.
fn variable(arg: &clap::Arg) -> Option<(String, OsString)> {
    let var = arg.get_env()?;
    let value = std::env::var_os(var)?;
    Some((var.to_string_lossy().into_owned(), value))
}

/// Parsed settings and where the file's came from, to name the file and line in a message
/// about one of them.
#[derive(Debug)]
pub struct Parsed<T> {
    /// The settings.
    pub args: T,
    /// The config file, if one was read.
    pub file: Option<PathBuf>,
    /// For each flag the file set (its long name), the key's line.
    pub from_file: BTreeMap<String, usize>,
    /// For each flag a variable set (its long name), the variable.
    pub from_env: BTreeMap<String, String>,
    /// The settings (long names) the command line set, `--config` aside.
    pub from_flags: BTreeSet<String>,
    /// Every setting's values, to tell which changed when the settings are read again.
    pub values: Values,
}

/// Every setting's values as given (their text; a default's too), by long name, in the
/// order of `--help`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Values(Vec<(String, Vec<OsString>)>);

impl Values {
    fn of(cmd: &Command, matches: &ArgMatches) -> Self {
        Self(
            cmd.get_arguments()
                .filter(|a| is_setting(a))
                .map(|a| {
                    let values = matches
                        .get_raw(a.get_id().as_str())
                        .map(|v| v.map(ToOwned::to_owned).collect())
                        .unwrap_or_default();
                    (a.get_long().unwrap_or_default().to_owned(), values)
                })
                .collect(),
        )
    }

    /// The settings (long names) whose values differ in `other` (the same command's), in
    /// order, but for those named in `except`.
    #[must_use]
    pub fn changed(&self, other: &Self, except: &[&str]) -> Vec<String> {
        let theirs: BTreeMap<&str, &Vec<OsString>> =
            other.0.iter().map(|(k, v)| (k.as_str(), v)).collect();
        self.0
            .iter()
            .filter(|(long, values)| {
                !except.contains(&long.as_str()) && theirs.get(long.as_str()) != Some(&values)
            })
            .map(|(long, _)| long.clone())
            .collect()
    }
}

impl<T> Parsed<T> {
    /// `message` (a refusal that starts with the flag it is about), with the file and line
    /// in front when the file set that flag, or the variable when a variable did.
    #[must_use]
    pub fn locate(&self, message: String) -> String {
        // `--long ...`, or `-s/--long ...` for a flag with a short form too.
        let flag = match message.split_once("/--") {
            Some((short, rest)) if short.len() == 2 && short.starts_with('-') => rest,
            _ => message.strip_prefix("--").unwrap_or_default(),
        };
        let about = |long: &str| {
            Some(flag)
                .and_then(|m| m.strip_prefix(long))
                .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', ':', '=']))
        };
        if let Some(var) = self
            .from_env
            .iter()
            .find(|(long, _)| about(long))
            .map(|(_, v)| v)
        {
            return format!("{var}: {message}");
        }
        match (
            &self.file,
            self.from_file.iter().find(|(long, _)| about(long)),
        ) {
            (Some(file), Some((_, line))) => format!("{}:{line}: {message}", file.display()),
            _ => message,
        }
    }

    /// Where the settings came from, for a line about them: how many from the file (named),
    /// the variables and the flags (`--config` itself aside).
    #[must_use]
    pub fn sources(&self) -> String {
        let file = self.file.as_ref().map_or_else(String::new, |f| {
            format!("{} from {}, ", self.from_file.len(), f.display())
        });
        let variables = self.from_env.keys().filter(|long| *long != CONFIG).count();
        format!(
            "{file}{variables} from variables, {} from flags, the rest defaults",
            self.from_flags.len()
        )
    }
}

/// Parses `argv` for `cmd` (which has a `--config` setting and the variables of
/// [`with_env`]) with the file's settings under the flags' and the variables'.
///
/// # Errors
/// A clap error (`--help` and `--version` too: the caller exits with it), a bad value of a
/// variable, or a file that cannot be read, is not TOML, or holds a key or value that is not
/// a setting.
pub fn parse<T: FromArgMatches>(
    cmd: &Command,
    argv: Vec<OsString>,
) -> Result<Parsed<T>, LayerError> {
    let given = flags_given(cmd, &argv)?;
    let on_command_line = |arg: &clap::Arg| {
        given.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine)
    };
    let mut layered = Vec::with_capacity(argv.len());
    let mut argv = argv.into_iter();
    layered.extend(argv.next());
    let (file, from_file) = match config_file(cmd, &given) {
        Some((file, var)) => {
            // Clap takes a variable where no flag sets its setting, as here.
            let (flags, from_file) = file_flags(cmd, &file, &|arg| {
                on_command_line(arg) || variable(arg).is_some()
            })
            .map_err(|e| {
                LayerError::File(match var {
                    Some(var) => e.context(var),
                    None => e,
                })
            })?;
            layered.extend(flags);
            (Some(file), from_file)
        }
        None => (None, BTreeMap::new()),
    };
    let (lists, from_lists) = list_variables(cmd, &on_command_line)?;
    layered.extend(lists);
    layered.extend(argv);
    // The lists' variables are split above, not taken whole by clap.
    let parser = cmd.clone().mut_args(|arg| {
        if is_list(&arg) {
            arg.env(None::<&'static str>)
        } else {
            arg
        }
    });
    let located = |e: clap::Error| match from_variable(cmd, &on_command_line, e) {
        LayerError::Clap(e) if e.kind() == ErrorKind::MissingRequiredArgument => {
            match requiring_variable(&parser, &layered, &from_lists, &on_command_line) {
                Some(var) => LayerError::Variable(format!("{var}: {}", clap_reason(&e))),
                None => LayerError::Clap(e),
            }
        }
        other => other,
    };
    let matches = parser
        .clone()
        .try_get_matches_from(&layered)
        .map_err(located)?;
    let args = T::from_arg_matches(&matches).map_err(located)?;
    let mut from_env = set_by_env(&parser, &matches);
    from_env.extend(from_lists);
    let from_flags = cmd
        .get_arguments()
        .filter(|a| is_setting(a) && a.get_id() != CONFIG && on_command_line(a))
        .filter_map(|a| a.get_long().map(ToOwned::to_owned))
        .collect();
    Ok(Parsed {
        args,
        file,
        from_file,
        from_env,
        from_flags,
        values: Values::of(&parser, &matches),
    })
}

/// What the command line alone gives (no variable, no file), parsed leniently: only to see
/// which settings it sets and the file it names. `--help` and `--version` end it, shown by
/// `cmd` (which names the variables).
fn flags_given(cmd: &Command, argv: &[OsString]) -> Result<ArgMatches, LayerError> {
    let bare = cmd
        .clone()
        .mut_args(|arg| arg.env(None::<&'static str>))
        .ignore_errors(true);
    bare.try_get_matches_from(argv)
        .map_err(|e| LayerError::Clap(cmd.clone().try_get_matches_from(argv).err().unwrap_or(e)))
}

/// The file `--config` names, on the command line or else in its variable (then named too).
fn config_file(cmd: &Command, given: &ArgMatches) -> Option<(PathBuf, Option<String>)> {
    if let Some(file) = given.try_get_one::<PathBuf>(CONFIG).ok().flatten() {
        return Some((file.clone(), None));
    }
    let (var, value) = cmd
        .get_arguments()
        .find(|a| a.get_id() == CONFIG)
        .and_then(variable)?;
    Some((PathBuf::from(value), Some(var)))
}

/// The flags the variables of [`is_list`] settings stand for, each value of the list checked
/// by its flag's parser; with the variable of each such setting. Those the command line sets
/// (`flagged`) are left out: a flag overrides a variable.
fn list_variables(
    cmd: &Command,
    flagged: &dyn Fn(&clap::Arg) -> bool,
) -> Result<(Vec<OsString>, BTreeMap<String, String>), LayerError> {
    let mut flags = Vec::new();
    let mut vars = BTreeMap::new();
    for arg in cmd.get_arguments().filter(|a| is_list(a) && !flagged(a)) {
        let Some((var, value)) = variable(arg) else {
            continue;
        };
        let long = arg.get_long().expect("a setting has a long name");
        let value = value.to_str().ok_or_else(|| {
            LayerError::Variable(format!(
                "{var}: not UTF-8; give --{long} on the command line instead"
            ))
        })?;
        for item in value.split(',') {
            check_value(cmd, arg, item)
                .map_err(|reason| LayerError::Variable(format!("{var}: {reason}")))?;
            flags.push(OsString::from(format!("--{long}={item}")));
        }
        vars.insert(long.to_owned(), var);
    }
    Ok((flags, vars))
}

/// Clap's error `e`, with the variables named in front when it is about values from
/// variables: the settings it names that the command line (`flagged`) does not set, whose
/// variable is set (to the value refused, when it names one).
fn from_variable(
    cmd: &Command,
    flagged: &dyn Fn(&clap::Arg) -> bool,
    e: clap::Error,
) -> LayerError {
    let refused = match e.get(ContextKind::InvalidValue) {
        Some(ContextValue::String(v)) => Some(v.as_str()),
        _ => None,
    };
    let vars: Vec<String> = [ContextKind::InvalidArg, ContextKind::PriorArg]
        .into_iter()
        .filter_map(|kind| e.get(kind))
        .flat_map(|v| match v {
            ContextValue::String(s) => vec![s.as_str()],
            ContextValue::Strings(v) => v.iter().map(String::as_str).collect(),
            _ => Vec::new(),
        })
        .filter_map(|named| named_arg(cmd, named))
        .filter(|arg| !flagged(arg))
        .filter_map(|arg| {
            let (var, value) = variable(arg)?;
            let value = value.to_string_lossy();
            let holds = |v: &str| match arg.get_value_delimiter() {
                Some(d) => value.split(d).any(|part| part == v),
                None => value == v,
            };
            refused.is_none_or(holds).then_some(var)
        })
        .collect();
    if vars.is_empty() {
        LayerError::Clap(e)
    } else {
        LayerError::Variable(format!("{}: {}", vars.join(", "), clap_reason(&e)))
    }
}

/// The variable whose setting requires another that nothing gives (`NEQO_SERVER_TLS_CERT`
/// without a key), which clap's message does not name: the first without which `parser` no
/// longer finds a required argument missing in `argv`. Those of `lists` are in `argv`, as
/// flags.
fn requiring_variable(
    parser: &Command,
    argv: &[OsString],
    lists: &BTreeMap<String, String>,
    flagged: &dyn Fn(&clap::Arg) -> bool,
) -> Option<String> {
    let still_missing = |cmd: Command, argv: &[OsString]| {
        matches!(
            cmd.try_get_matches_from(argv),
            Err(e) if e.kind() == ErrorKind::MissingRequiredArgument
        )
    };
    let from_lists = lists.iter().find(|(long, _)| {
        let prefix = format!("--{long}=");
        let without: Vec<OsString> = argv
            .iter()
            .filter(|a| !a.to_string_lossy().starts_with(&prefix))
            .cloned()
            .collect();
        !still_missing(parser.clone(), &without)
    });
    if let Some((_, var)) = from_lists {
        return Some(var.clone());
    }
    parser
        .get_arguments()
        .filter(|a| is_setting(a) && !flagged(a))
        .filter_map(|a| Some((a.get_id().clone(), variable(a)?.0)))
        .find(|(id, _)| {
            let without = parser
                .clone()
                .mut_arg(id.clone(), |a| a.env(None::<&'static str>));
            !still_missing(without, argv)
        })
        .map(|(_, var)| var)
}

/// The argument a clap message names as `--long <VALUE>` (or `-s` without a long name).
fn named_arg<'c>(cmd: &'c Command, named: &str) -> Option<&'c clap::Arg> {
    let flag = named.split([' ', '=']).next()?;
    match flag.strip_prefix("--") {
        Some(long) => cmd.get_arguments().find(|a| a.get_long() == Some(long)),
        None => {
            let short = flag.strip_prefix('-')?.chars().next()?;
            cmd.get_arguments().find(|a| a.get_short() == Some(short))
        }
    }
}

/// The flags (long names) variables set in `matches`, with the variables.
fn set_by_env(cmd: &Command, matches: &ArgMatches) -> BTreeMap<String, String> {
    cmd.get_arguments()
        .filter(|a| matches.value_source(a.get_id().as_str()) == Some(ValueSource::EnvVariable))
        .filter_map(|a| {
            let var = a.get_env()?.to_string_lossy().into_owned();
            Some((a.get_long()?.to_owned(), var))
        })
        .collect()
}

/// Why the settings could not be parsed.
#[derive(Debug)]
pub enum LayerError {
    /// From the flags or variables; also `--help` and `--version`.
    Clap(clap::Error),
    /// A variable's value, refused: the message names the variable.
    Variable(String),
    /// From the file.
    File(anyhow::Error),
}

impl LayerError {
    /// Ends `program` as the error says: clap's own exit for its errors (`--help` shown,
    /// status 2 for a usage error), the same status 2 for a variable's bad value, 1 for a
    /// file that was refused.
    pub fn exit(self, program: &str) -> ExitCode {
        match self {
            Self::Clap(e) => e.exit(),
            Self::Variable(m) => {
                eprintln!("{program}: error: {m}");
                ExitCode::from(2)
            }
            Self::File(e) => {
                eprintln!("{program}: error: {e:#}");
                ExitCode::FAILURE
            }
        }
    }

    /// The error as one message, for a parse again after start (SIGHUP).
    #[must_use]
    pub fn into_anyhow(self) -> anyhow::Error {
        match self {
            Self::Clap(e) => anyhow::anyhow!("{}", clap_reason(&e)),
            Self::Variable(m) => anyhow::anyhow!("{m}"),
            Self::File(e) => e,
        }
    }
}

/// The text of the config file at `path`, read within bounds: opened without blocking (a
/// FIFO would wait for a writer for ever), a regular file only (not a FIFO, a device such as
/// /dev/zero, a directory or a socket), at most [`MAX_CONFIG`] bytes however it grows while
/// being read, UTF-8. Symbolic links are followed (configs are often links into a managed
/// tree); a loop of them is named as such. On Unix a file every user may write, or that
/// belongs to neither this user nor root, is refused: whoever can change it changes the
/// settings. Not the secret file's rules: a config is not secret.
///
/// # Errors
/// Each of those, naming `--config` and the file.
pub fn read_config(path: &Path) -> anyhow::Result<String> {
    let shown = path.display();
    let refuse = |why: String| anyhow::anyhow!("--config {shown}: {why}");
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    let file = options
        .open(path)
        .map_err(|e| refuse(open_error(path, &e)))?;
    let meta = file
        .metadata()
        .map_err(|e| refuse(format!("cannot read it: {e}")))?;
    if !meta.is_file() {
        return Err(refuse(format!(
            "{}, not a regular file",
            kind(&meta.file_type())
        )));
    }
    #[cfg(unix)]
    hygiene(&meta).map_err(refuse)?;
    if meta.len() > MAX_CONFIG {
        return Err(refuse(format!(
            "{} bytes; a config file holds at most {MAX_CONFIG} (1 MiB)",
            meta.len()
        )));
    }
    // One byte more than allowed tells a file that grew past the cap from one that fits.
    let mut bytes = Vec::new();
    (&file)
        .take(MAX_CONFIG + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| refuse(format!("cannot read it: {e}")))?;
    if bytes.len() as u64 > MAX_CONFIG {
        return Err(refuse(format!(
            "grew past {MAX_CONFIG} bytes while being read; a config file holds at most 1 MiB"
        )));
    }
    String::from_utf8(bytes).map_err(|e| refuse(not_utf8(e.as_bytes(), e.utf8_error())))
}

/// Why the open of a config file failed, in words: a loop of symbolic links, or what the
/// path is when it is no file (a socket cannot be opened at all).
fn open_error(path: &Path, e: &std::io::Error) -> String {
    #[cfg(unix)]
    if e.raw_os_error() == Some(libc::ELOOP) {
        return format!("cannot read it: symbolic links in a loop, or too many in a row ({e})");
    }
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => format!("{}, not a regular file", kind(&m.file_type())),
        _ => format!("cannot read it: {e}"),
    }
}

/// What a file that is not a regular one is.
fn kind(t: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() {
        "a directory"
    } else {
        "a special file"
    }
}

/// Refuses a config file others could change: writable by every user, or owned by another
/// user than this one or root.
#[cfg(unix)]
fn hygiene(meta: &std::fs::Metadata) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt as _;

    let mode = meta.mode() & 0o7777;
    if mode & 0o002 != 0 {
        return Err(format!(
            "writable by every user (mode {mode:04o}), any of whom could change the settings; \
             `chmod o-w` it"
        ));
    }
    let (owner, me) = (meta.uid(), super::os::effective_uid());
    if owner != me && owner != 0 {
        return Err(format!(
            "owned by user {owner}, neither this user ({me}) nor root, and that user could \
             change the settings; `chown` it"
        ));
    }
    Ok(())
}

/// Where text that is not UTF-8 goes wrong, as a line and column.
fn not_utf8(bytes: &[u8], e: std::str::Utf8Error) -> String {
    let valid = &bytes[..e.valid_up_to()];
    let line_start = valid.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let line = valid.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = std::str::from_utf8(&valid[line_start..]).map_or(0, |s| s.chars().count()) + 1;
    format!(
        "not UTF-8: a byte that is no character at line {line}, column {column} (byte {}); \
         a config file is UTF-8 text",
        e.valid_up_to()
    )
}

/// `value` checked by the parser of `arg` (of `cmd`) alone: what is wrong with it, on one
/// line.
fn check_value(cmd: &Command, arg: &clap::Arg, value: &str) -> Result<(), String> {
    let long = arg.get_long().expect("a setting has a long name");
    Command::new(cmd.get_name().to_owned())
        .no_binary_name(true)
        .arg(
            clap::Arg::new("value")
                .long(long.to_owned())
                .value_parser(arg.get_value_parser().clone()),
        )
        .try_get_matches_from([format!("--{long}={value}")])
        .map(|_| ())
        .map_err(|e| clap_reason(&e))
}

/// The flags the file at `path` stands for, each with its key's line: those of the settings
/// `set` (by a flag or a variable) does not hold.
fn file_flags(
    cmd: &Command,
    path: &Path,
    set: &dyn Fn(&clap::Arg) -> bool,
) -> anyhow::Result<(Vec<OsString>, BTreeMap<String, usize>)> {
    let shown = path.display();
    let text = read_config(path)?;
    let line = |at: usize| text[..at].matches('\n').count() + 1;
    let table: BTreeMap<Spanned<String>, Spanned<Value>> = toml::from_str(&text).map_err(|e| {
        // Not toml's own rendering, which quotes the line: all of it, however long.
        let at = e.span().map_or(0, |s| s.start).min(text.len());
        let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
        let column = text[start..at].chars().count() + 1;
        let why: Vec<&str> = e
            .message()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        anyhow::anyhow!(
            "{shown}: TOML parse error at line {}, column {column}: {}",
            line(at),
            why.join("; ")
        )
    })?;
    let mut flags = Vec::new();
    let mut from_file = BTreeMap::new();
    for (key, value) in &table {
        let key_line = line(key.span().start);
        let at = format!("{shown}:{key_line}");
        let key = key.get_ref().as_str();
        let Some(arg) = cmd.get_arguments().find(|a| {
            is_setting(a)
                && a.get_id() != CONFIG
                && (a.get_long() == Some(key)
                    || a.get_all_aliases().is_some_and(|v| v.contains(&key)))
        }) else {
            bail!(
                "{at}: unknown key `{key}`; the keys are the long flag names (see {} --help)",
                cmd.get_name()
            );
        };
        let long = arg.get_long().expect("a setting has a long name");
        if set(arg) {
            continue;
        }
        let values: Vec<String> = match value.get_ref() {
            Value::Array(items) if matches!(arg.get_action(), ArgAction::Append) => items
                .iter()
                .map(|v| {
                    scalar(v).ok_or_else(|| {
                        anyhow::anyhow!("{at}: `{key}`: a list of strings or numbers")
                    })
                })
                .collect::<anyhow::Result<_>>()?,
            Value::Array(_) => bail!("{at}: `{key}` takes one value, not a list"),
            v => vec![
                scalar(v)
                    .ok_or_else(|| anyhow::anyhow!("{at}: `{key}`: a string, number or boolean"))?,
            ],
        };
        if arg.get_action().takes_values() {
            for v in &values {
                check_value(cmd, arg, v)
                    .map_err(|reason| anyhow::anyhow!("{at}: `{key}` = {v:?}: {reason}"))?;
                flags.push(OsString::from(format!("--{long}={v}")));
            }
        } else {
            match value.get_ref() {
                Value::Boolean(true) => flags.push(OsString::from(format!("--{long}"))),
                Value::Boolean(false) => {}
                _ => bail!("{at}: `{key}` is a switch: true or false"),
            }
        }
        from_file.insert(long.to_owned(), key_line);
    }
    Ok((flags, from_file))
}

/// A value as a flag's text; `None` for a table, a list or a date.
fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Integer(i) => Some(i.to_string()),
        Value::Float(f) => Some(f.to_string()),
        Value::Boolean(b) => Some(b.to_string()),
        Value::Datetime(_) | Value::Array(_) | Value::Table(_) => None,
    }
}

/// What a value parser said, on one line, without clap's framing (`error: `, the pointer to
/// `--help`).
fn clap_reason(e: &clap::Error) -> String {
    let text = e.to_string();
    text.lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with("For more information") && !l.starts_with("Usage:")
        })
        .map(|l| l.strip_prefix("error: ").unwrap_or(l))
        .fold(String::new(), |mut line, l| {
            // A list clap puts under its heading (`not provided:`) goes on after it.
            if line.ends_with(':') {
                line.push(' ');
            } else if !line.is_empty() {
                line.push_str("; ");
            }
            line.push_str(l);
            line
        })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;
    use crate::cli::ServerArgs;

    fn values(args: &[&str]) -> Values {
        // No variables: the settings come from `args` alone, whatever this process's
        // environment holds.
        let cmd = ServerArgs::command();
        let argv = std::iter::once("neqo-server").chain(args.iter().copied());
        parse::<ServerArgs>(&cmd, argv.map(OsString::from).collect())
            .unwrap_or_else(|_| panic!("{args:?}"))
            .values
    }

    /// The settings that differ are named by their flags, in `--help`'s order, whatever the
    /// order or spelling they were given in; those excepted and those equal are not.
    #[test]
    fn changed_settings_are_named_by_their_flags() {
        let start = values(&["--workers", "1", "--tls-cert", "a", "--tls-key", "b"]);
        assert!(start.changed(&start, &[]).is_empty());
        let again = values(&[
            "--tls-key=d",
            "--workers=2",
            "--cert",
            "c",
            "--listen",
            "127.0.0.1:1",
        ]);
        assert_eq!(
            start.changed(&again, &["tls-cert", "tls-key"]),
            ["listen", "workers"]
        );
        assert_eq!(
            start.changed(&again, &[]),
            ["listen", "tls-cert", "tls-key", "workers"]
        );
        // A default given as a flag is the same value.
        assert!(
            values(&["--retry", "auto"])
                .changed(&values(&[]), &[])
                .is_empty()
        );
    }

    /// Text that is not UTF-8 is placed by line and character, not only by byte.
    #[test]
    fn not_utf8_is_placed_by_line_and_column() {
        let bytes = b"workers = 1\nroot = \"caf\xc3\xa9 \xff\"\n";
        let e = String::from_utf8(bytes.to_vec()).unwrap_err().utf8_error();
        assert_eq!(
            not_utf8(bytes, e),
            "not UTF-8: a byte that is no character at line 2, column 14 (byte 26); a config \
             file is UTF-8 text"
        );
    }

    /// `check-config` is an action: no variable, no key.
    #[test]
    fn actions_are_no_settings() {
        let cmd = with_env(ServerArgs::command(), "NEQO_SERVER_");
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some("check-config"))
            .expect("--check-config");
        assert!(!is_setting(arg) && arg.get_env().is_none());
    }
}
