//! The hold protocol with Envoy's Lua hold filters: defined once in
//! [`keyhole_core::proto::hold`] (which also generates the Lua side's constants).

pub use keyhole_core::proto::hold::*;
