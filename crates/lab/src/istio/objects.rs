//! Istio: what the capacity study applied to its cluster, as typed structs serialised to YAML:
//! per workspace a `Gateway` with one HTTPS server per domain (credential by name), per domain
//! a `VirtualService` with one exact-path match per path, rewritten to `/` and routed to the
//! backend; a `ServiceEntry` that names the backend at the address given to `--backend` (its
//! one static endpoint), so that the routes go where the flag says; and the
//! `kubernetes.io/tls` Secrets the credentials name. Each object is typed: Istio's kinds from
//! [`meshbench_k8s::objects::istio`] (`v1beta1`), the Secret k8s-openapi's. There is no
//! cluster here: the output is tested by parsing it back into the same types ([`parse_all`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use meshbench_k8s::objects::istio::{
    self, Destination, GatewaySpec, HttpMatch, HttpRoute, Location, Port, PortSelector, Resolution,
    Rewrite, RouteDestination, Server, ServerTls, ServiceEndpoint, ServiceEntrySpec, StringMatch,
    V1beta1, VirtualServiceSpec,
};
use meshbench_k8s::objects::meta;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::IstioError;
use crate::gateway::{GatewayPlan, Target, DOMAINS_PER_WORKSPACE};
use crate::kube::workloads::tls_secret;
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

/// The ingress gateway's `Gateway` (Istio's `v1beta1`, which every Istio serves).
pub type Gateway = istio::Gateway<V1beta1>;
/// A domain's `VirtualService`.
pub type VirtualService = istio::VirtualService<V1beta1>;
/// The backend's `ServiceEntry`.
pub type ServiceEntry = istio::ServiceEntry<V1beta1>;
pub use meshbench_k8s::k8s_openapi::api::core::v1::Secret;

/// The backend as the mesh knows it: [`BACKEND_HOST`] on the backend's port, an endpoint per
/// replica's address (HTTP, or gRPC in the clear).
pub fn backend_entry(plan: &GatewayPlan) -> ServiceEntry {
    let protocol = if plan.grpc { "GRPC" } else { "HTTP" };
    ServiceEntry {
        metadata: meta("meshbench-backend", NAMESPACE),
        spec: ServiceEntrySpec {
            hosts: vec![BACKEND_HOST.into()],
            addresses: Vec::new(),
            // The backend has no sidecar: the gateway speaks to it in the clear.
            location: Location::MeshExternal,
            ports: vec![Port {
                number: plan.backend().port(),
                name: protocol.to_ascii_lowercase(),
                protocol: protocol.into(),
            }],
            resolution: Resolution::Static,
            endpoints: plan
                .backends
                .iter()
                .map(|b| ServiceEndpoint {
                    address: b.ip().to_string(),
                })
                .collect(),
        },
        version: V1beta1,
    }
}

fn workspace_of(domain_index: usize) -> usize {
    domain_index / DOMAINS_PER_WORKSPACE + 1
}

/// A domain's server on its workspace's Gateway: HTTPS with its credential, gRPC in the
/// clear (h2c with prior knowledge) or HTTP; with `at_listen`, bound to the plan's `listen`
/// address and port, else on Istio's port for the scheme on every address.
fn server(plan: &GatewayPlan, domain: &str, at_listen: bool) -> Server {
    let (number, protocol, tls) = if plan.tls {
        let credential = plan.secret_name(domain);
        (
            443,
            "HTTPS",
            Some(ServerTls {
                mode: "SIMPLE".into(),
                credential_name: credential,
            }),
        )
    } else if plan.grpc {
        (80, "GRPC", None)
    } else {
        (80, "HTTP", None)
    };
    Server {
        port: Port {
            number: if at_listen {
                plan.listen.port()
            } else {
                number
            },
            name: format!("{}-{domain}", protocol.to_ascii_lowercase()),
            protocol: protocol.into(),
        },
        bind: at_listen.then(|| plan.listen.ip().to_string()),
        tls,
        hosts: vec![domain.to_string()],
    }
}

/// The Gateways (one per workspace) and VirtualServices (one per domain). With `at_listen`,
/// every server binds the plan's `listen` address and port (the lab's gateway), else Istio's
/// ports on every address (a cluster's ingress).
pub fn resources(plan: &GatewayPlan, istio: &Istio) -> (Vec<Gateway>, Vec<VirtualService>) {
    let scope = &istio.scope;
    let ns = scope.namespace.as_str();
    let backend = Destination {
        host: scope.backend_host.as_deref().unwrap_or(BACKEND_HOST).into(),
        port: PortSelector {
            number: scope.backend_port.unwrap_or(plan.backend().port()),
        },
    };
    let workspaces = plan.domains.div_ceil(DOMAINS_PER_WORKSPACE);
    let mut gateways: Vec<Gateway> = (1..=workspaces)
        .map(|w| Gateway {
            metadata: meta(format!("workspace-{w}-gateway"), ns),
            spec: GatewaySpec {
                selector: BTreeMap::from([scope.selector.clone()]),
                servers: Vec::new(),
            },
            version: V1beta1,
        })
        .collect();
    let mut services = Vec::with_capacity(plan.domains);
    for (i, domain) in plan.domain_names().enumerate() {
        let w = workspace_of(i);
        gateways[w - 1]
            .spec
            .servers
            .push(server(plan, &domain, istio.at_listen));
        services.push(VirtualService {
            metadata: meta(domain.clone(), ns),
            spec: VirtualServiceSpec {
                hosts: vec![domain],
                gateways: vec![format!("{ns}/workspace-{w}-gateway")],
                http: plan
                    .path_list()
                    .map(|path| HttpRoute {
                        matches: vec![HttpMatch {
                            uri: StringMatch::exact(path),
                        }],
                        // None for gRPC: the method's path is the route.
                        rewrite: (!plan.grpc).then(|| Rewrite { uri: "/".into() }),
                        route: vec![RouteDestination {
                            destination: backend.clone(),
                        }],
                        ..HttpRoute::default()
                    })
                    .collect(),
            },
            version: V1beta1,
        });
    }
    (gateways, services)
}

fn to_yaml<T: Serialize>(docs: &[T]) -> Result<String, LabError> {
    Ok(crate::kube::yaml_stream(docs).map_err(IstioError::Yaml)?)
}

/// Istio as a gateway [`Target`]: YAML to apply to a cluster, whose ingress is reached by
/// host name on the default port ([`Istio::cluster`]), or to a namespace of its own there
/// ([`Istio::within`]: an experiment's gateway on a cluster); or to the lab's own control
/// plane, whose gateway listens at the plan's address ([`Istio::lab`]).
#[derive(Debug, Clone)]
pub struct Istio {
    /// Bind every server to the plan's `listen` address and port.
    pub at_listen: bool,
    pub scope: ObjectsScope,
}

/// Where the objects go and what they name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectsScope {
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
            scope: ObjectsScope {
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

    /// A gateway of a cluster's, in `scope`.
    pub fn within(scope: ObjectsScope) -> Istio {
        Istio {
            at_listen: false,
            scope,
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
        let secrets: Vec<Secret> = certs
            .iter()
            .map(|(name, issued)| {
                tls_secret(
                    &crate::gateway::secret_of(name),
                    issued,
                    &self.scope.namespace,
                )
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
        if self.scope.backend_host.is_none() {
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
        Ok(vec![crate::kube::apply_line(written)])
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
        let ip = plan.backend().ip();
        let mut notes = vec![format!(
            "every route goes to {BACKEND_HOST}:{port}, the ServiceEntry in {SERVICE_ENTRY_FILE} whose one endpoint is {ip}: the ingress gateway's pods must reach {ip}:{port}",
            port = plan.backend().port()
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

/// Parses a multi-document YAML file written for [`Istio`] back into `T`s, each document's
/// `apiVersion` and `kind` checked to be `T`'s.
pub fn parse_all<T>(text: &str) -> Result<Vec<T>, IstioError>
where
    T: meshbench_k8s::k8s_openapi::Resource + DeserializeOwned,
{
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| {
            let value = serde_json::Value::deserialize(doc)?;
            let said = |field: &str| value[field].as_str().unwrap_or_default().to_string();
            let (api_version, kind) = (said("apiVersion"), said("kind"));
            if (api_version.as_str(), kind.as_str()) != (T::API_VERSION, T::KIND) {
                return Err(IstioError::NotKind {
                    expected: format!("{} {}", T::API_VERSION, T::KIND),
                    found: format!("{api_version} {kind}"),
                });
            }
            Ok(serde_json::from_value(value)?)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::CertLayout;

    fn plan(tls: bool) -> GatewayPlan {
        GatewayPlan {
            domains: 3,
            paths: 2,
            tls,
            http2: false,
            http3: false,
            grpc: false,
            certs: CertLayout::PerDomain,
            backends: vec!["10.1.2.3:18080".parse().unwrap()],
            listen: "127.0.0.1:8443".parse().unwrap(),
            workers: 1,
            admin: None,
            out: PathBuf::from("/nonexistent"),
            access_log: None,
            listeners_file: false,
            rotated: Default::default(),
        }
    }

    #[test]
    fn what_is_written_reads_back_as_the_same_typed_objects() {
        let plan = plan(true);
        let (gateways, services) = resources(&plan, &Istio::lab());
        let back: Vec<Gateway> = parse_all(&to_yaml(&gateways).unwrap()).unwrap();
        assert_eq!(back, gateways);
        let back: Vec<VirtualService> = parse_all(&to_yaml(&services).unwrap()).unwrap();
        assert_eq!(back, services);
        let entry = [backend_entry(&plan)];
        let back: Vec<ServiceEntry> = parse_all(&to_yaml(&entry).unwrap()).unwrap();
        assert_eq!(back, entry);
        let issued = Issued {
            cert_pem: "-----BEGIN CERTIFICATE-----\n".into(),
            key_pem: "key".into(),
            cert_der: Vec::new(),
        };
        let secrets = [tls_secret("a.com-cert", &issued, NAMESPACE)];
        let yaml = to_yaml(&secrets).unwrap();
        assert!(yaml.contains("type: kubernetes.io/tls\n"), "{yaml}");
        assert!(
            yaml.contains("tls.key: a2V5\n"),
            "base64 of the PEM: {yaml}"
        );
        let back: Vec<Secret> = parse_all(&yaml).unwrap();
        assert_eq!(back, secrets);
        let server = &gateways[0].spec.servers[1];
        assert_eq!(server.bind.as_deref(), Some("127.0.0.1"));
        assert_eq!(server.port.number, 8443);
        assert_eq!(
            server.tls.as_ref().unwrap().credential_name,
            "workspace-1-domain-2.com-cert"
        );
    }

    #[test]
    fn a_document_of_another_kind_is_not_read_as_the_kind_asked_for() {
        let (gateways, _) = resources(&plan(false), &Istio::cluster());
        let err = parse_all::<VirtualService>(&to_yaml(&gateways).unwrap()).unwrap_err();
        assert!(matches!(err, IstioError::NotKind { .. }), "{err}");
    }
}
