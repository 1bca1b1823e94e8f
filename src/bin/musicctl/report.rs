//! The one trait every command's report implements: how it reads on a terminal, its JSON,
//! and the exit code it means.

use musicd::admin::compare::CompareReport;
use musicd::admin::health::HealthReport;
use musicd::admin::purge::Purged;
use musicd::admin::reindex::RebuildReport;
use musicd::admin::resolve::ResolveReport;
use musicd::admin::revoke::RevokeReport;
use musicd_load::players::PlayersReport;
use musicd_load::replay::ReplayReport;

/// What a command found or did, printed once it is over.
pub(crate) trait Report {
    /// The text for a terminal.
    fn text(&self) -> String;
    /// The same as pretty JSON (`--json`).
    fn json(&self) -> serde_json::Result<String>;
    /// 0 done or healthy, 1 findings or partial failure, 2 could not run.
    fn exit_code(&self) -> u8;
}

/// Reports whose own `render` and `exit_code` say it all.
macro_rules! rendered {
    ($($report:ty),* $(,)?) => {$(
        impl Report for $report {
            fn text(&self) -> String {
                self.render()
            }
            fn json(&self) -> serde_json::Result<String> {
                serde_json::to_string_pretty(self)
            }
            fn exit_code(&self) -> u8 {
                <$report>::exit_code(self)
            }
        }
    )*};
}

rendered!(
    Purged,
    HealthReport,
    RebuildReport,
    CompareReport,
    ResolveReport,
    RevokeReport,
    ReplayReport,
    PlayersReport,
);

/// `verify`'s report, whose warnings count as findings with `--strict`.
pub(crate) struct Verify {
    pub(crate) verified: musicd::admin::verify::Verified,
    pub(crate) strict: bool,
}

impl Report for Verify {
    fn text(&self) -> String {
        self.verified.render()
    }
    fn json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(&self.verified)
    }
    fn exit_code(&self) -> u8 {
        self.verified.exit_code(self.strict)
    }
}

/// A command that printed as it went (`list`, `import`, `sign`, `watch`): nothing is left
/// to print, and it succeeded.
pub(crate) struct Printed;

impl Report for Printed {
    fn text(&self) -> String {
        String::new()
    }
    fn json(&self) -> serde_json::Result<String> {
        Ok(String::new())
    }
    fn exit_code(&self) -> u8 {
        0
    }
}

/// `plays`' report: a table of the `top` tracks, or CSV rows.
pub(crate) struct Counted {
    pub(crate) report: musicd_load::plays::PlaysReport,
    pub(crate) top: usize,
    pub(crate) csv: bool,
}

impl Report for Counted {
    fn text(&self) -> String {
        if self.csv {
            self.report.csv()
        } else {
            self.report.render(self.top)
        }
    }
    fn json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(&self.report)
    }
    fn exit_code(&self) -> u8 {
        self.report.exit_code()
    }
}

/// A report and how it was asked to be printed.
pub(crate) struct Shown {
    pub(crate) report: Box<dyn Report>,
    pub(crate) json: bool,
}

impl Shown {
    pub(crate) fn new(report: impl Report + 'static, json: bool) -> Shown {
        Shown {
            report: Box::new(report),
            json,
        }
    }

    /// Prints it (JSON or text) and gives its exit code.
    pub(crate) fn print(&self) -> anyhow::Result<std::process::ExitCode> {
        if self.json {
            let json = self.report.json()?;
            if !json.is_empty() {
                println!("{json}");
            }
        } else {
            print!("{}", self.report.text());
        }
        Ok(std::process::ExitCode::from(self.report.exit_code()))
    }
}
