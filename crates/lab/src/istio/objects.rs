//! Istio: what the capacity study applied to its cluster, as typed structs serialised to YAML:
//! per workspace a `Gateway` with one HTTPS server per domain (credential by name), per domain
//! a `VirtualService` with one exact-path match per path, rewritten to `/` and routed to the
//! backend; a `ServiceEntry` that names the backend at the address given to `--backend` (its
//! one static endpoint), so that the routes go where the flag says; and the
//! `kubernetes.io/tls` Secrets the credentials name. There is no cluster here: the output is
//! tested by parsing it back into the same types.

use std::collections::BTreeMap;
use std::path::PathBuf;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::IstioError;
use crate::gateway::{GatewayPlan, Target, DOMAINS_PER_WORKSPACE};
use crate::pki::Issued;
use crate::{write_file, LabError};

/// Namespace of the gateway, its Secrets and the routes.
pub const NAMESPACE: &str = "istio-system";
/// The host the routes send to: the [`ServiceEntry`] whose one endpoint is the address given
/// to `--backend`, on its port.
pub const BACKEND_HOST: &str = "meshbench-backend.internal";
/// The file of the backend's ServiceEntry.
pub const SERVICE_ENTRY_FILE: &str = "istio-serviceentry.yaml";
/// The file of the VirtualServices.
pub const VIRTUAL_SERVICES_FILE: &str = "istio-virtualservices.yaml";
/// The ingress gateway's Service, whose address `meshbench run` connects to.
pub const INGRESS_SERVICE: &str = "istio-ingressgateway";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Resource<S> {
    pub api_version: String,
    pub kind: String,
    pub metadata: Metadata,
    #[serde(flatten)]
    pub body: S,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Metadata {
    pub name: String,
    pub namespace: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GatewayBody {
    pub spec: GatewaySpec,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GatewaySpec {
    pub selector: BTreeMap<String, String>,
    pub servers: Vec<Server>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Server {
    pub port: Port,
    /// The address the gateway's listener binds (Istio's default: every address).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub bind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tls: Option<ServerTls>,
    pub hosts: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Port {
    pub number: u16,
    pub name: String,
    pub protocol: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServerTls {
    pub mode: String,
    pub credential_name: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VirtualServiceBody {
    pub spec: VirtualServiceSpec,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VirtualServiceSpec {
    pub hosts: Vec<String>,
    pub gateways: Vec<String>,
    pub http: Vec<HttpRoute>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HttpRoute {
    #[serde(rename = "match")]
    pub matches: Vec<HttpMatch>,
    /// None for gRPC: the method's path is the route.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rewrite: Option<Rewrite>,
    pub route: Vec<RouteDestination>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HttpMatch {
    pub uri: StringMatch,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StringMatch {
    pub exact: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Rewrite {
    pub uri: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RouteDestination {
    pub destination: Destination,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Destination {
    pub host: String,
    pub port: PortSelector,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PortSelector {
    pub number: u16,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SecretBody {
    #[serde(rename = "type")]
    pub kind: String,
    pub data: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ServiceEntryBody {
    pub spec: ServiceEntrySpec,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ServiceEntrySpec {
    pub hosts: Vec<String>,
    /// `MESH_EXTERNAL`: the backend has no sidecar, the gateway speaks to it in the clear.
    pub location: String,
    pub ports: Vec<Port>,
    /// `STATIC`: the endpoints are addresses, not names to resolve.
    pub resolution: String,
    pub endpoints: Vec<ServiceEndpoint>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ServiceEndpoint {
    pub address: String,
}

pub type Gateway = Resource<GatewayBody>;
pub type VirtualService = Resource<VirtualServiceBody>;
pub type Secret = Resource<SecretBody>;
pub type ServiceEntry = Resource<ServiceEntryBody>;

/// The backend as the mesh knows it: [`BACKEND_HOST`] on the backend's port, its one endpoint
/// the backend's address (HTTP, or gRPC in the clear).
pub fn backend_entry(plan: &GatewayPlan) -> ServiceEntry {
    let protocol = if plan.grpc { "GRPC" } else { "HTTP" };
    Resource {
        api_version: "networking.istio.io/v1beta1".into(),
        kind: "ServiceEntry".into(),
        metadata: meta("meshbench-backend".into(), NAMESPACE),
        body: ServiceEntryBody {
            spec: ServiceEntrySpec {
                hosts: vec![BACKEND_HOST.into()],
                location: "MESH_EXTERNAL".into(),
                ports: vec![Port {
                    number: plan.backend.port(),
                    name: protocol.to_ascii_lowercase(),
                    protocol: protocol.into(),
                }],
                resolution: "STATIC".into(),
                endpoints: vec![ServiceEndpoint {
                    address: plan.backend.ip().to_string(),
                }],
            },
        },
    }
}

fn meta(name: String, namespace: &str) -> Metadata {
    Metadata {
        name,
        namespace: namespace.to_string(),
    }
}

fn workspace_of(domain_index: usize) -> usize {
    domain_index / DOMAINS_PER_WORKSPACE + 1
}

/// The Gateways (one per workspace) and VirtualServices (one per domain). With `at_listen`,
/// every server binds the plan's `listen` address and port (the lab's gateway), else Istio's
/// ports on every address (a cluster's ingress).
pub fn resources(plan: &GatewayPlan, istio: &Istio) -> (Vec<Gateway>, Vec<VirtualService>) {
    let at_listen = istio.at_listen;
    let place = &istio.place;
    let ns = place.namespace.as_str();
    let backend_host = place.backend_host.as_deref().unwrap_or(BACKEND_HOST);
    let backend_port = place.backend_port.unwrap_or(plan.backend.port());
    let workspaces = plan.domains.div_ceil(DOMAINS_PER_WORKSPACE);
    let mut gateways: Vec<Gateway> = (1..=workspaces)
        .map(|w| Resource {
            api_version: "networking.istio.io/v1beta1".into(),
            kind: "Gateway".into(),
            metadata: meta(format!("workspace-{w}-gateway"), ns),
            body: GatewayBody {
                spec: GatewaySpec {
                    selector: BTreeMap::from([place.selector.clone()]),
                    servers: Vec::new(),
                },
            },
        })
        .collect();
    let mut services = Vec::with_capacity(plan.domains);
    for (i, domain) in plan.domain_names().enumerate() {
        let w = workspace_of(i);
        let (number, protocol, tls) = if plan.tls {
            let credential = match plan.certs {
                crate::gateway::CertLayout::PerDomain => format!("{domain}-cert"),
                crate::gateway::CertLayout::Shared => "shared-cert".to_string(),
            };
            (
                443,
                "HTTPS",
                Some(ServerTls {
                    mode: "SIMPLE".into(),
                    credential_name: credential,
                }),
            )
        } else if plan.grpc {
            // h2c with prior knowledge.
            (80, "GRPC", None)
        } else {
            (80, "HTTP", None)
        };
        let number = if at_listen {
            plan.listen.port()
        } else {
            number
        };
        gateways[w - 1].body.spec.servers.push(Server {
            bind: at_listen.then(|| plan.listen.ip().to_string()),
            port: Port {
                number,
                name: format!("{}-{domain}", protocol.to_ascii_lowercase()),
                protocol: protocol.into(),
            },
            tls,
            hosts: vec![domain.clone()],
        });
        services.push(Resource {
            api_version: "networking.istio.io/v1beta1".into(),
            kind: "VirtualService".into(),
            metadata: meta(domain.clone(), ns),
            body: VirtualServiceBody {
                spec: VirtualServiceSpec {
                    hosts: vec![domain.clone()],
                    gateways: vec![format!("{ns}/workspace-{w}-gateway")],
                    http: plan
                        .path_list()
                        .map(|path| HttpRoute {
                            matches: vec![HttpMatch {
                                uri: StringMatch { exact: path },
                            }],
                            rewrite: (!plan.grpc).then(|| Rewrite { uri: "/".into() }),
                            route: vec![RouteDestination {
                                destination: Destination {
                                    host: backend_host.into(),
                                    port: PortSelector {
                                        number: backend_port,
                                    },
                                },
                            }],
                        })
                        .collect(),
                },
            },
        });
    }
    (gateways, services)
}

fn to_yaml<T: Serialize>(docs: &[T]) -> Result<String, LabError> {
    let mut out = String::new();
    for d in docs {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(d).map_err(IstioError::Yaml)?);
    }
    Ok(out)
}

/// Istio as a gateway [`Target`]: YAML to apply to a cluster, whose ingress is reached by
/// host name on the default port ([`Istio::cluster`]), or to a namespace of its own there
/// ([`Istio::within`]: an experiment's gateway on a cluster); or to the lab's own control
/// plane, whose gateway listens at the plan's address ([`Istio::lab`]).
#[derive(Debug, Clone)]
pub struct Istio {
    /// Bind every server to the plan's `listen` address and port.
    pub at_listen: bool,
    pub place: Place,
}

/// Where the objects go and what they name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// Of the Gateways, VirtualServices and Secrets (the gateway pods' own namespace, where
    /// Istio looks for the credentials).
    pub namespace: String,
    /// The gateway pods' label the Gateways select.
    pub selector: (String, String),
    /// The routes' destination: a Service's host name; none: [`BACKEND_HOST`], the
    /// ServiceEntry at `--backend` (written too).
    pub backend_host: Option<String>,
    /// Its port; none: `--backend`'s.
    pub backend_port: Option<u16>,
}

impl Istio {
    /// A cluster's ingress gateway: `istio: ingressgateway` in istio-system.
    pub fn cluster() -> Istio {
        Istio {
            at_listen: false,
            place: Place {
                namespace: NAMESPACE.into(),
                selector: ("istio".into(), "ingressgateway".into()),
                backend_host: None,
                backend_port: None,
            },
        }
    }

    /// The lab's gateway, at the plan's address.
    pub fn lab() -> Istio {
        Istio {
            at_listen: true,
            ..Istio::cluster()
        }
    }

    /// A gateway of a cluster's, in `place`.
    pub fn within(place: Place) -> Istio {
        Istio {
            at_listen: false,
            place,
        }
    }
}

impl Target for Istio {
    /// The Gateways, VirtualServices and (with TLS) Secrets, one YAML file each.
    fn write(
        &self,
        plan: &GatewayPlan,
        certs: &[(String, Issued)],
    ) -> Result<Vec<PathBuf>, LabError> {
        let (gateways, services) = resources(plan, self);
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let secrets: Vec<Secret> = certs
            .iter()
            .map(|(name, issued)| Resource {
                api_version: "v1".into(),
                kind: "Secret".into(),
                metadata: meta(format!("{name}-cert"), &self.place.namespace),
                body: SecretBody {
                    kind: "kubernetes.io/tls".into(),
                    data: BTreeMap::from([
                        ("tls.crt".to_string(), b64(&issued.cert_pem)),
                        ("tls.key".to_string(), b64(&issued.key_pem)),
                    ]),
                },
            })
            .collect();
        let mut files = Vec::new();
        // In the order they are applied: what a resource names exists before it.
        if !secrets.is_empty() {
            files.push(write_file(
                plan.path("istio-secrets.yaml"),
                to_yaml(&secrets)?,
            )?);
        }
        if self.place.backend_host.is_none() {
            files.push(write_file(
                plan.path(SERVICE_ENTRY_FILE),
                to_yaml(&[backend_entry(plan)])?,
            )?);
        }
        files.extend([
            write_file(plan.path("istio-gateways.yaml"), to_yaml(&gateways)?)?,
            write_file(plan.path(VIRTUAL_SERVICES_FILE), to_yaml(&services)?)?,
        ]);
        Ok(files)
    }

    /// `kubectl apply` of every file written, in order.
    fn start(&self, _: &GatewayPlan, written: &[PathBuf]) -> Result<Vec<String>, LabError> {
        let mut line = String::from("kubectl apply");
        for file in written {
            line.push_str(" -f ");
            line.push_str(&crate::gateway::shell_word(&file.display().to_string()));
        }
        Ok(vec![line])
    }

    fn start_heading(&self) -> &'static str {
        "apply it to the cluster with"
    }

    /// The ingress gateway's external address, asked of the cluster, on the scheme's port.
    fn connect_to(&self, plan: &GatewayPlan) -> (Vec<String>, String) {
        if self.at_listen {
            return (
                Vec::new(),
                crate::gateway::shell_word(&format!(
                    "::{}:{}",
                    plan.listen.ip(),
                    plan.listen.port()
                )),
            );
        }
        let port = if plan.tls { 443 } else { 80 };
        (
            vec![format!(
                "INGRESS_HOST=$(kubectl -n {NAMESPACE} get service {INGRESS_SERVICE} -o jsonpath='{{.status.loadBalancer.ingress[0].ip}}')"
            )],
            format!("\"::$INGRESS_HOST:{port}\""),
        )
    }

    fn notes(&self, plan: &GatewayPlan) -> Vec<String> {
        let ip = plan.backend.ip();
        let mut notes = vec![format!(
            "every route goes to {BACKEND_HOST}:{port}, the ServiceEntry in {SERVICE_ENTRY_FILE} whose one endpoint is {ip}: the ingress gateway's pods must reach {ip}:{port}",
            port = plan.backend.port()
        )];
        if ip.is_loopback() || ip.is_unspecified() {
            notes.push(format!(
                "{ip} is each gateway pod's own address, not the backend's: give --backend an address the pods reach (a pod, node or load balancer IP)"
            ));
        }
        notes
    }

    fn name(&self) -> &'static str {
        "istio"
    }

    fn by_name(&self) -> bool {
        !self.at_listen
    }
}

/// Parses a multi-document YAML file written for [`Istio`] back into `T`s.
pub fn parse_all<T: for<'de> Deserialize<'de>>(text: &str) -> Result<Vec<T>, String> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| T::deserialize(doc).map_err(|e| e.to_string()))
        .collect()
}
