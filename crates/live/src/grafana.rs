//! The Grafana dashboard (TO BE BUILT: see the issue).

/// The dashboard's JSON.
pub fn dashboard() -> serde_json::Value {
    serde_json::json!({})
}
