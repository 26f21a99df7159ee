//! The Gateway API's `Gateway` (gateway.networking.k8s.io/v1) as meshbench writes it: Istio's
//! waypoint for a namespace (class `istio-waypoint`, one HBONE listener). Only the fields
//! meshbench uses; a typed object (see [`crate::objects`]).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::namespaced_resource;

/// The Gateway API's group.
pub const GROUP: &str = "gateway.networking.k8s.io";

/// A Gateway of the Gateway API (not Istio's own [`crate::objects::istio::Gateway`]).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Gateway {
    pub metadata: ObjectMeta,
    pub spec: GatewaySpec,
}

namespaced_resource!(Gateway, group: GROUP, version: "v1",
    api_version: "gateway.networking.k8s.io/v1", kind: "Gateway", plural: "gateways");

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewaySpec {
    pub gateway_class_name: String,
    pub listeners: Vec<Listener>,
    /// What the controller puts on the Deployment it renders for the Gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure: Option<Infrastructure>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listener {
    pub name: String,
    pub port: u16,
    /// `HBONE`, `HTTP`, `HTTPS`...
    pub protocol: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Infrastructure {
    /// Labels of the rendered Deployment's pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations of the rendered Deployment's pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}
