//! The Rust UDFs registered in an engine ([`UdfRegistry`]): the built-ins and those the
//! embedding program adds; every new session registers them, and a cluster's node finds a
//! placed call's UDF here by name.

use std::sync::{Arc, RwLock};

use super::definition::ScalarUdf;
use super::set::SetUdf;
use crate::core::error::Result;
use crate::definition_err;

/// The registered UDFs at one moment.
#[derive(Debug, Clone, Default)]
pub(crate) struct Registry {
    pub(crate) scalar: Vec<Arc<ScalarUdf>>,
    pub(crate) set: Vec<Arc<SetUdf>>,
}

impl Registry {
    /// Whether a UDF of either kind is named `name`.
    pub(crate) fn contains(&self, name: &str) -> bool {
        self.scalar.iter().any(|u| u.name() == name) || self.set.iter().any(|u| u.name() == name)
    }

    fn check_new_name(&self, name: &str) -> Result<()> {
        if self.contains(name) {
            return Err(definition_err!("a UDF named {name} is already registered"));
        }
        Ok(())
    }
}

/// An engine's registry, shared by its sessions (registration takes effect for sessions opened
/// afterwards).
#[derive(Debug, Default)]
pub(crate) struct UdfRegistry(RwLock<Registry>);

impl UdfRegistry {
    /// A registry holding `scalar` and `set` UDFs.
    pub(crate) fn new(scalar: Vec<ScalarUdf>, set: Vec<SetUdf>) -> Self {
        Self(RwLock::new(Registry {
            scalar: scalar.into_iter().map(Arc::new).collect(),
            set: set.into_iter().map(Arc::new).collect(),
        }))
    }

    /// The UDFs registered now.
    pub(crate) fn snapshot(&self) -> Registry {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether a UDF of either kind is named `name`.
    pub(crate) fn contains(&self, name: &str) -> bool {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(name)
    }

    /// The scalar UDF named `name`.
    pub(crate) fn scalar(&self, name: &str) -> Option<Arc<ScalarUdf>> {
        let registry = self.0.read().unwrap_or_else(|e| e.into_inner());
        registry.scalar.iter().find(|u| u.name() == name).cloned()
    }

    /// The set (SET or EMITS) UDF named `name`.
    pub(crate) fn set(&self, name: &str) -> Option<Arc<SetUdf>> {
        let registry = self.0.read().unwrap_or_else(|e| e.into_inner());
        registry.set.iter().find(|u| u.name() == name).cloned()
    }

    /// Adds a scalar UDF; 42E01 if the name is taken.
    pub(crate) fn register_scalar(&self, udf: ScalarUdf) -> Result<()> {
        let mut registry = self.0.write().unwrap_or_else(|e| e.into_inner());
        registry.check_new_name(udf.name())?;
        registry.scalar.push(Arc::new(udf));
        Ok(())
    }

    /// Adds a set UDF; 42E01 if the name is taken.
    pub(crate) fn register_set(&self, udf: SetUdf) -> Result<()> {
        let mut registry = self.0.write().unwrap_or_else(|e| e.into_inner());
        registry.check_new_name(udf.name())?;
        registry.set.push(Arc::new(udf));
        Ok(())
    }
}
