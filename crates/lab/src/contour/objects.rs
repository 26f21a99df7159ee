//! Contour's objects for the gateway plan, typed and serialised to YAML, as a user of Contour
//! writes them for the capacity study's gateway: per domain an `HTTPProxy` whose virtual host
//! is the domain, served with the domain's `kubernetes.io/tls` Secret, one route per path (a
//! prefix condition, the prefix replaced by `/` as the study's routes rewrite it; gRPC's
//! methods as they are, over h2c) sent to the backend's Service; that Service, and the
//! EndpointSlice holding the backend's one address, which meshbench writes since no controller
//! manager runs to. The HTTPProxy is [`meshbench_k8s::objects::contour`]'s, the rest
//! k8s-openapi's. What Contour makes of them is proven by Envoy serving them and by Contour's
//! own status of each HTTPProxy ([`super::ControlPlane::invalid_proxies`]).

use std::path::PathBuf;

use meshbench_k8s::k8s_openapi::api::core::v1::{Namespace, Service, ServicePort, ServiceSpec};
use meshbench_k8s::k8s_openapi::api::discovery::v1::EndpointSlice;
use meshbench_k8s::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use meshbench_k8s::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use meshbench_k8s::names::HTTP;
use meshbench_k8s::objects::contour::{
    Condition, HttpProxy, HttpProxySpec, PathRewritePolicy, ReplacePrefix, Route, RouteService,
    Tls, VirtualHost,
};
use meshbench_k8s::objects::meta;
use serde::Serialize;

use super::{ContourError, NAMESPACE};
use crate::gateway::{GatewayPlan, Target};
use crate::kube::workloads;
use crate::pki::Issued;
use crate::program::envoy::ready;
use crate::{write_file, LabError};

/// The backend's Service, which every route sends to.
pub const BACKEND_SERVICE: &str = "backend";
/// The files, in the order they are applied (what one names exists before it).
pub const BACKEND_FILE: &str = "contour-backend.yaml";
pub const SECRETS_FILE: &str = "contour-secrets.yaml";
pub const HTTP_PROXIES_FILE: &str = "contour-httpproxies.yaml";
/// Contour's listener for TLS virtual hosts, and the prefix of their route configurations
/// (`https/<fqdn>`, one per virtual host).
pub const HTTPS_LISTENER: &str = "ingress_https";
pub const HTTPS_ROUTES: &str = "https/";

/// One HTTPProxy per domain, in `namespace` (the lab's [`NAMESPACE`], a cluster run's own).
pub fn http_proxies(plan: &GatewayPlan, namespace: &str) -> Vec<HttpProxy> {
    let service = RouteService {
        name: BACKEND_SERVICE.into(),
        port: plan.backend().port(),
        // gRPC goes to the backend as HTTP/2 in the clear; the rest as HTTP/1.1.
        protocol: plan.grpc.then(|| "h2c".into()),
    };
    plan.domain_names()
        .map(|domain| HttpProxy {
            metadata: meta(domain.clone(), namespace),
            spec: HttpProxySpec {
                virtualhost: Some(VirtualHost {
                    tls: plan.tls.then(|| Tls {
                        secret_name: plan.secret_name(&domain),
                    }),
                    fqdn: domain,
                }),
                routes: plan
                    .path_list()
                    .map(|path| Route {
                        conditions: vec![Condition { prefix: Some(path) }],
                        services: vec![service.clone()],
                        // None for gRPC: the method's path is the route.
                        path_rewrite_policy: (!plan.grpc).then(|| PathRewritePolicy {
                            replace_prefix: vec![ReplacePrefix {
                                prefix: None,
                                replacement: "/".into(),
                            }],
                        }),
                    })
                    .collect(),
            },
            status: None,
        })
        .collect()
}

/// The namespace, the backend's Service (its port the backend's) and its EndpointSlice.
fn backend_objects(plan: &GatewayPlan, namespace: &str) -> (Namespace, Service, EndpointSlice) {
    let port = plan.backend().port();
    let namespace_object = Namespace {
        metadata: ObjectMeta {
            name: Some(namespace.into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    let service = Service {
        metadata: meta(BACKEND_SERVICE, namespace),
        spec: Some(ServiceSpec {
            ports: Some(vec![ServicePort {
                name: Some(HTTP.into()),
                port: port.into(),
                target_port: Some(IntOrString::Int(port.into())),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    let slice = workloads::endpoint_slice(
        format!("{BACKEND_SERVICE}-1"),
        namespace,
        BACKEND_SERVICE,
        plan.backends
            .iter()
            .map(|b| workloads::endpoint(b.ip().to_string(), None))
            .collect(),
        port,
    );
    (namespace_object, service, slice)
}

/// What Contour's Envoy holds once Contour has sent everything for `plan`: the TLS listener
/// with a filter chain per domain, every route, every domain's certificate, the backend's
/// endpoint. Contour makes two Envoy routes of a route whose prefix it replaces, one for
/// `/get/1` and one for `/get/1/` (`expandPrefixMatches` in its DAG builder), so that each
/// path counts twice; gRPC's routes keep their paths and count once.
pub fn expected(plan: &GatewayPlan) -> ready::Expected {
    let per_path = if plan.grpc { 1 } else { 2 };
    ready::Expected {
        listener: HTTPS_LISTENER.into(),
        filter_chains: plan.domains,
        route_configs: ready::RouteConfigs::Prefixed(HTTPS_ROUTES),
        routes: plan.domains * plan.routes_per_domain() * per_path,
        certificates: plan.domains,
        backend: (
            format!("{NAMESPACE}/{BACKEND_SERVICE}/{}/", plan.backend().port()),
            plan.backends.clone(),
        ),
    }
}

fn to_yaml<T: Serialize>(docs: &[T]) -> Result<String, LabError> {
    Ok(crate::kube::yaml_stream(docs).map_err(ContourError::Yaml)?)
}

/// Contour as a gateway [`Target`]: the objects for the lab's API server, whose Envoy listens
/// at the plan's address (`contour serve --envoy-service-https-address/-port`), or for a
/// cluster's Contour (a run's own namespace, of which a cluster run applies the Secrets and
/// the HTTPProxies: its backend's Service is its own). TLS only: a virtual host without it is
/// served on Contour's other listener, which the load is not run against.
#[derive(Debug, Clone)]
pub struct Contour {
    /// Where the objects live.
    pub namespace: String,
}

impl Default for Contour {
    /// The lab's: in [`NAMESPACE`].
    fn default() -> Self {
        Contour {
            namespace: NAMESPACE.into(),
        }
    }
}

impl Target for Contour {
    fn name(&self) -> &'static str {
        "contour"
    }

    /// The backend's objects, the Secrets and the HTTPProxies, one YAML file each.
    fn write(
        &self,
        plan: &GatewayPlan,
        certs: &[(String, Issued)],
    ) -> Result<Vec<PathBuf>, LabError> {
        let (namespace, service, slice) = backend_objects(plan, &self.namespace);
        let mut backend = to_yaml(&[namespace])?;
        backend.push_str(&to_yaml(&[service])?);
        backend.push_str(&to_yaml(&[slice])?);
        let secrets: Vec<_> = certs
            .iter()
            .map(|(name, issued)| {
                workloads::tls_secret(&crate::gateway::secret_of(name), issued, &self.namespace)
            })
            .collect();
        let mut files = vec![write_file(plan.path(BACKEND_FILE), backend)?];
        if !secrets.is_empty() {
            files.push(write_file(plan.path(SECRETS_FILE), to_yaml(&secrets)?)?);
        }
        files.push(write_file(
            plan.path(HTTP_PROXIES_FILE),
            to_yaml(&http_proxies(plan, &self.namespace))?,
        )?);
        Ok(files)
    }

    /// `kubectl apply` of every file written, in order (the lab applies them itself).
    fn start(&self, _: &GatewayPlan, written: &[PathBuf]) -> Result<Vec<String>, LabError> {
        Ok(vec![crate::kube::apply_line(written)])
    }

    fn start_heading(&self) -> &'static str {
        "apply it to the cluster with"
    }

    fn notes(&self, plan: &GatewayPlan) -> Vec<String> {
        let backend = plan.backend();
        let mut notes = vec![format!(
            "every route goes to Service {BACKEND_SERVICE} in namespace {}, whose EndpointSlice names {backend}: Contour's Envoy pods must reach it; --listen is where the load reaches Contour's Envoy (its Service's HTTPS address)",
            self.namespace
        )];
        if backend.ip().is_loopback() || backend.ip().is_unspecified() {
            notes.push(format!(
                "{} is each Envoy pod's own address, not the backend's: give --backend an address the pods reach (a pod, node or load balancer IP)",
                backend.ip()
            ));
        }
        notes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::CertLayout;

    fn plan(grpc: bool) -> GatewayPlan {
        GatewayPlan {
            domains: 3,
            paths: 2,
            tls: true,
            http2: false,
            http3: false,
            grpc,
            certs: CertLayout::PerDomain,
            backends: vec!["127.0.0.1:18080".parse().unwrap()],
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
    fn each_domain_is_a_proxy_with_its_secret_and_a_rewritten_route_per_path() {
        let proxies = http_proxies(&plan(false), NAMESPACE);
        assert_eq!(proxies.len(), 3);
        let p = &proxies[1];
        assert_eq!(p.metadata.name.as_deref(), Some("workspace-1-domain-2.com"));
        let vhost = p.spec.virtualhost.as_ref().unwrap();
        assert_eq!(vhost.fqdn, "workspace-1-domain-2.com");
        assert_eq!(
            vhost.tls.as_ref().unwrap().secret_name,
            "workspace-1-domain-2.com-cert"
        );
        assert_eq!(p.spec.routes.len(), 2);
        let route = &p.spec.routes[1];
        assert_eq!(route.conditions[0].prefix.as_deref(), Some("/get/2"));
        assert_eq!(route.services[0].port, 18080);
        assert_eq!(route.services[0].protocol, None);
        let rewrite = &route.path_rewrite_policy.as_ref().unwrap().replace_prefix[0];
        assert_eq!(
            (rewrite.prefix.as_deref(), rewrite.replacement.as_str()),
            (None, "/")
        );
        let yaml = to_yaml(&proxies).unwrap();
        assert!(
            yaml.contains("apiVersion: projectcontour.io/v1\nkind: HTTPProxy\n"),
            "{yaml}"
        );
        assert!(yaml.contains("pathRewritePolicy:\n"), "{yaml}");
        assert!(yaml.contains("replacePrefix:\n"), "{yaml}");
        assert!(
            yaml.contains("secretName: workspace-1-domain-1.com-cert\n"),
            "{yaml}"
        );
        assert!(!yaml.contains("status"), "{yaml}");
    }

    #[test]
    fn grpc_routes_keep_their_methods_over_h2c() {
        let proxies = http_proxies(&plan(true), NAMESPACE);
        let route = &proxies[0].spec.routes[0];
        assert_eq!(
            route.conditions[0].prefix.as_deref(),
            Some(crate::gateway::GRPC_ROUTES[0])
        );
        assert_eq!(route.services[0].protocol.as_deref(), Some("h2c"));
        assert!(route.path_rewrite_policy.is_none());
        assert_eq!(expected(&plan(true)).routes, 3 * 2);
    }

    #[test]
    fn envoy_is_expected_to_hold_two_routes_per_rewritten_path() {
        let e = expected(&plan(false));
        assert_eq!((e.filter_chains, e.routes, e.certificates), (3, 12, 3));
        assert_eq!(e.backend.0, "meshbench/backend/18080/");
    }
}
