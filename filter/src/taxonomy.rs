//! The alias taxonomy a scan borrows: the one of the listener's configuration.

use keyhole_core::alias::Taxonomy;
use std::cell::RefCell;
use std::sync::Arc;

/// `taxonomy`, leaked once per distinct digest: a scan borrows it across a
/// callout, and a worker's configurations are few and live as long as it does.
pub fn leaked(taxonomy: &Arc<Taxonomy>) -> &'static Taxonomy {
    thread_local! {
        static LEAKED: RefCell<Vec<&'static Taxonomy>> = const { RefCell::new(Vec::new()) };
    }
    LEAKED.with(|all| {
        let mut all = all.borrow_mut();
        if let Some(t) = all.iter().find(|t| t.digest() == taxonomy.digest()) {
            return *t;
        }
        let t: &'static Taxonomy = Box::leak(Box::new(Taxonomy::clone(taxonomy)));
        all.push(t);
        t
    })
}
