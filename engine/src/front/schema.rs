//! A session's current schema: where unqualified tables and scripts resolve, `OPEN SCHEMA`,
//! `CLOSE SCHEMA`, and what creating or dropping a schema does to it.

use super::exasol::schemas::{DEFAULT_SCHEMA, SchemaChange, schema_has_scripts};
use super::privileges;
use super::session::Session;
use crate::core::error::Result;
use crate::core::names::exasol_name;
use crate::core::privileges::SystemPrivilege;

impl Session {
    /// The catalog accelsql's schemas live in (`datafusion.catalog.default_catalog`).
    pub(super) fn default_catalog(&self) -> String {
        self.ctx
            .copied_config()
            .options()
            .catalog
            .default_catalog
            .clone()
    }

    /// Whether schema `name` exists in the default catalog.
    pub(super) fn schema_exists(&self, name: &str) -> bool {
        self.ctx
            .catalog(&self.default_catalog())
            .is_some_and(|c| c.schema(name).is_some())
    }

    /// The current schema: unqualified tables and scripts resolve there.
    pub fn current_schema(&self) -> String {
        self.scripts.current_schema()
    }

    /// The open schema as Exasol names it (`FN1`); `None` after `CLOSE SCHEMA`, as Exasol's
    /// `CURRENT_SCHEMA` and its drivers' `currentSchema` attribute show it.
    pub fn exasol_schema(&self) -> Option<String> {
        self.scripts.open_schema().map(|s| exasol_name(&s))
    }

    /// Makes `name` the current schema for tables (DataFusion's default schema) and scripts.
    pub(super) fn set_current_schema(&self, name: &str) {
        self.resolve_in(name, true);
    }

    /// `CLOSE SCHEMA`: no schema is open; unqualified names still resolve in the default one.
    pub(super) fn close_schema(&self) {
        self.resolve_in(DEFAULT_SCHEMA, false);
    }

    /// Unqualified tables and scripts resolve in `name` from now on; `open`: it is the open schema.
    pub(super) fn resolve_in(&self, name: &str, open: bool) {
        let state = self.ctx.state_ref();
        let mut state = state.write();
        state.config_mut().options_mut().catalog.default_schema = name.to_string();
        self.scripts.set_current_schema(name, open);
    }

    /// Before a `DROP SCHEMA`: without CASCADE, a schema holding scripts stays; with it, a
    /// restricted session may not drop them.
    pub(super) fn check_schema_change(&self, change: &SchemaChange) -> Result<()> {
        let SchemaChange::Drop { names, cascade } = change else {
            return Ok(());
        };
        for name in names {
            let scripts = self.engine.scripts().scripts_in(name);
            if scripts.is_empty() {
                continue;
            }
            if !cascade {
                return Err(schema_has_scripts(name, &scripts));
            }
            let grants = self.identity.grants();
            let owners: Vec<Option<String>> = self
                .engine
                .scripts()
                .entries()
                .iter()
                .filter(|e| &e.schema == name)
                .map(|e| e.owner.clone())
                .collect();
            grants
                .check(|h, as_owner| {
                    h.has(SystemPrivilege::DropAnyScript)
                        || (as_owner && owners.iter().all(|o| grants.owns(o.as_deref())))
                })
                .map_err(|d| {
                    privileges::refusal(
                        d,
                        &format!(
                            "DROP SCHEMA {name} CASCADE would drop its scripts ({})",
                            scripts.join(", ")
                        ),
                        "owning them, or the DROP ANY SCRIPT privilege",
                    )
                })?;
        }
        Ok(())
    }

    /// After a schema statement succeeded: a created schema becomes current; a dropped one takes
    /// its scripts with it (CASCADE) and, if it was current, the default schema is current again.
    pub(super) fn apply_schema_change(&self, change: SchemaChange) -> Result<()> {
        match change {
            SchemaChange::Create(name) => self.set_current_schema(&name),
            SchemaChange::Drop { names, cascade } => {
                let current = self.current_schema();
                for name in names {
                    if cascade {
                        self.engine.scripts().drop_schema_scripts(&name)?;
                    }
                    if name == current {
                        self.close_schema();
                    }
                }
            }
        }
        Ok(())
    }
}
