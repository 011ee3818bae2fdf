//! `accelsql users import FILE`: moves the users of a server's users file (`accelsql serve
//! add-user`) into the catalog of a data directory (`CREATE USER`'s users), hashes unchanged,
//! and grants each of them `CREATE SESSION`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use accelsql_engine::{Engine, EngineError, EngineOptions, SchedulerConfig};
use clap::{Args, Subcommand};

use crate::error::{CliError, EXIT_SHELL_FAILURE};

/// `accelsql users …`.
#[derive(Debug, Subcommand)]
pub(crate) enum UsersCommand {
    /// Import the users of a server's users file (`accelsql serve add-user`) into the catalog
    /// of a data directory: each becomes a catalog user with the same password (its hash is
    /// copied, not re-made) and gets CREATE SESSION; a user already in the catalog keeps its
    /// privileges and gets the file's password.
    Import(ImportArgs),
}

/// Options of `accelsql users import`.
#[derive(Debug, Args)]
pub(crate) struct ImportArgs {
    /// The users file: `NAME:pbkdf2-sha256:ROUNDS:SALT:HASH` per line (`#` comments); it must
    /// be owner-only, as `accelsql serve --users` requires.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// The data directory whose catalog gets the users (as `accelsql --data-dir` and
    /// `accelsql serve --data-dir` take it); required, since an in-memory catalog would forget
    /// them at exit.
    #[arg(long, value_name = "DIR", required = true)]
    data_dir: Option<PathBuf>,
    /// Also grant the DBA role (every privilege) to this catalog user (one of the file's, or
    /// one already in the catalog).
    #[arg(long, value_name = "NAME")]
    admin_user: Option<String>,
}

/// One entry of a users file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    /// The 1-based line it stands on.
    line: usize,
    /// The user's name, as written.
    name: String,
    /// `pbkdf2-sha256:ROUNDS:SALT:HASH`.
    hash: String,
}

/// Runs `accelsql users …`.
pub(crate) fn run(command: UsersCommand) -> Result<ExitCode, CliError> {
    match command {
        UsersCommand::Import(args) => import(&args),
    }
}

fn import(args: &ImportArgs) -> Result<ExitCode, CliError> {
    let Some(data_dir) = &args.data_dir else {
        return Err(config_error(
            "accelsql users import needs --data-dir DIR: the users go into that directory's \
             catalog (an in-memory one would forget them at exit)"
                .into(),
        ));
    };
    // Every line is checked before anything is imported: a bad file changes nothing.
    let entries = read_users_file(&args.file)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Terminal(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async {
        let engine = Engine::with_options(EngineOptions {
            // The catalog is all this needs: no device probing.
            scheduler: SchedulerConfig::default().with_simulated_gpus(0),
            data_dir: Some(data_dir.clone()),
            ..EngineOptions::default()
        })
        .map_err(|e| CliError::Engine(Box::new(e)))?;
        // An --admin-user that will not exist is refused before anything changes.
        if let Some(admin) = &args.admin_user {
            let in_file = entries
                .iter()
                .any(|e| e.name == *admin || e.name == admin.to_ascii_uppercase());
            if !in_file && engine.user_name(admin).is_none() {
                return Err(CliError::Engine(Box::new(EngineError::DoesNotExist {
                    what: format!(
                        "user {admin} (--admin-user: neither in {} nor in the catalog)",
                        args.file.display()
                    ),
                })));
            }
        }
        let sys = engine.session();
        let (mut new, mut updated, mut failed) = (0usize, 0usize, 0usize);
        for entry in &entries {
            let imported = match engine.import_user(&entry.name, &entry.hash) {
                Ok(added) => sys
                    .sql(&format!(
                        "GRANT CREATE SESSION TO {}",
                        quoted_identifier(&entry.name)
                    ))
                    .await
                    .map(|_| added),
                Err(e) => Err(e),
            };
            match imported {
                Ok(true) => {
                    new += 1;
                    println!("imported {} (new)", entry.name);
                }
                Ok(false) => {
                    updated += 1;
                    println!("updated {}", entry.name);
                }
                Err(e) => {
                    failed += 1;
                    eprintln!(
                        "{} (user {} on line {})",
                        CliError::Engine(Box::new(e)).report(),
                        entry.name,
                        entry.line
                    );
                }
            }
        }
        if let Some(admin) = &args.admin_user {
            let granted = match engine.user_name(admin) {
                Some(name) => sys
                    .sql(&format!("GRANT DBA TO {}", quoted_identifier(&name)))
                    .await
                    .map(|_| name),
                None => Err(EngineError::DoesNotExist {
                    what: format!("user {admin} (--admin-user)"),
                }),
            };
            match granted {
                Ok(name) => println!("granted DBA to {name}"),
                Err(e) => {
                    failed += 1;
                    eprintln!("{}", CliError::Engine(Box::new(e)).report());
                }
            }
        }
        let failures = if failed > 0 {
            format!("; {failed} failed")
        } else {
            String::new()
        };
        println!(
            "{} user(s) imported into {} ({new} new, {updated} updated){failures}",
            new + updated,
            data_dir.display()
        );
        Ok(if failed > 0 {
            ExitCode::from(EXIT_SHELL_FAILURE)
        } else {
            ExitCode::SUCCESS
        })
    })
}

/// A users-file error, as `accelsql serve --users` reports one.
fn config_error(message: String) -> CliError {
    CliError::Server(Box::new(accelsql_server::ServerError::Config { message }))
}

/// The entries of the users file at `path`, which must be owner-only; an error names the file
/// and, for a malformed line, its number.
fn read_users_file(path: &Path) -> Result<Vec<Entry>, CliError> {
    check_owner_only(path)?;
    let text = std::fs::read_to_string(path).map_err(|e| {
        config_error(format!(
            "cannot read the users file {}: {e}",
            path.display()
        ))
    })?;
    parse_users(&text).map_err(|(line, message)| {
        config_error(format!(
            "users file {}, line {line}: {message}",
            path.display()
        ))
    })
}

/// Refuses a file that its group or others may read or write (Unix): it holds password hashes.
fn check_owner_only(path: &Path) -> Result<(), CliError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path).map_err(|e| {
            config_error(format!(
                "cannot read the users file {}: {e}",
                path.display()
            ))
        })?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(config_error(format!(
                "the users file {} may be read or written by others (mode {mode:o}); it holds \
                 password hashes: make it owner-only (chmod 600 {})",
                path.display(),
                path.display()
            )));
        }
    }
    Ok(())
}

/// The entries of a users file's text: `NAME:HASH` per line, blank and `#` lines skipped; an
/// error gives the 1-based line number and what is wrong.
fn parse_users(text: &str) -> Result<Vec<Entry>, (usize, String)> {
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, hash)) = line.split_once(':') else {
            return Err((
                i + 1,
                "expected NAME:pbkdf2-sha256:ROUNDS:SALT:HASH, found no ':'".into(),
            ));
        };
        if name.is_empty() || name.trim() != name {
            return Err((
                i + 1,
                format!("the user name {name:?} is empty or has surrounding spaces"),
            ));
        }
        accelsql_engine::check_hash(hash).map_err(|m| (i + 1, format!("user {name}: {m}")))?;
        entries.push(Entry {
            line: i + 1,
            name: name.to_string(),
            hash: hash.to_string(),
        });
    }
    Ok(entries)
}

/// `name` as a quoted SQL identifier (case kept; `"` doubled).
fn quoted_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::Cli;

    const HASH: &str =
        "pbkdf2-sha256:1000:AAAAAAAAAAAAAAAAAAAAAA:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

    #[test]
    fn users_import_parses() {
        let cli = Cli::try_parse_from([
            "accelsql",
            "users",
            "import",
            "u.txt",
            "--data-dir",
            "d",
            "--admin-user",
            "alice",
        ])
        .unwrap();
        let Some(crate::Command::Users(UsersCommand::Import(args))) = cli.command else {
            panic!("not users import");
        };
        assert_eq!(args.file, Path::new("u.txt"));
        assert_eq!(args.data_dir.as_deref(), Some(Path::new("d")));
        assert_eq!(args.admin_user.as_deref(), Some("alice"));
        // The catalog must be a directory's.
        assert!(Cli::try_parse_from(["accelsql", "users", "import", "u.txt"]).is_err());
    }

    #[test]
    fn a_users_file_parses_skipping_blank_and_comment_lines() {
        let text = format!("# users\n\nalice:{HASH}\n  bob:{HASH}  \n");
        let entries = parse_users(&text).unwrap();
        assert_eq!(
            entries,
            [
                Entry {
                    line: 3,
                    name: "alice".into(),
                    hash: HASH.into()
                },
                Entry {
                    line: 4,
                    name: "bob".into(),
                    hash: HASH.into()
                }
            ]
        );
    }

    #[test]
    fn a_malformed_line_is_an_error_naming_its_number() {
        let text = format!("alice:{HASH}\n# c\nbob\n");
        assert_eq!(parse_users(&text).unwrap_err().0, 3);
        let text = format!("alice:{HASH}\nbob:md5:1:x:y\n");
        let (line, message) = parse_users(&text).unwrap_err();
        assert_eq!(line, 2);
        assert!(message.contains("bob"), "{message}");
        assert_eq!(parse_users(&format!(":{HASH}")).unwrap_err().0, 1);
    }

    #[test]
    fn names_are_quoted_as_stored() {
        assert_eq!(quoted_identifier("alice"), "\"alice\"");
        assert_eq!(quoted_identifier("a\"b"), "\"a\"\"b\"");
    }
}
