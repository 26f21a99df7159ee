//! Istio's ingress gateway as a step's gateway (`gateway.type: istio`): deployed by the run
//! in its namespace (a Deployment injected as a gateway, its Gateway and VirtualServices), and
//! configured by the cluster's istiod. Ready when its Envoy, read from its admin through a
//! port-forward, holds what the lab's gateway is awaited for ([`meshbench_lab::istio`]'s one
//! rule).

use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use meshbench_engine::Stop;
use meshbench_experiment::external::{ExternalRole, Preset};
use meshbench_k8s::blocking::ApiError;
use meshbench_k8s::k8s_openapi;
use meshbench_k8s::system;
use meshbench_k8s::{names, BlockingClient, Forward};
use meshbench_lab::gateway::Target;
use meshbench_lab::istio::objects::{Istio, ObjectsScope};
use meshbench_lab::istio::{gateway_expected, ADMIN_PORT};
use meshbench_lab::program::envoy::ready::{self, Awaited};
use meshbench_results::{ChainRole, Program, Role};

use super::{ClusterGateway, GatewayNotReady, NeededCrd};
use crate::place::cluster::pods;

/// The run's Istio gateway.
pub(super) struct IstioGateway {
    /// The run's namespace, which holds it.
    pub namespace: String,
    pub domains: usize,
    /// Routes across the domains.
    pub routes: usize,
}

impl IstioGateway {
    fn live_pods(&self, client: &BlockingClient) -> Result<Vec<Pod>, ApiError> {
        pods::live(client, &self.namespace, names::GATEWAY_PODS)
    }
}

impl ClusterGateway for IstioGateway {
    fn program(&self) -> Program {
        Program::Istio
    }

    fn crd(&self) -> NeededCrd {
        NeededCrd {
            crd: "gateways.networking.istio.io",
            what: "Istio's ingress gateway (Gateway, VirtualService)",
            install: "Istio",
        }
    }

    fn missing(&self, _: &BlockingClient) -> Result<Vec<String>, ApiError> {
        Ok(Vec::new())
    }

    fn injected(&self) -> bool {
        true
    }

    fn entry(&self) -> (&str, &str, u16) {
        (&self.namespace, system::GATEWAY, names::GATEWAY_HTTPS_PORT)
    }

    /// Its Deployment is the run's, waited for with the others.
    fn wait_rollouts(
        &self,
        _: &BlockingClient,
        _: Duration,
        _: &Stop,
    ) -> Result<(), GatewayNotReady> {
        Ok(())
    }

    fn wait_ready(
        &self,
        client: &BlockingClient,
        backend: SocketAddr,
        limit: Duration,
        stop: &Stop,
    ) -> Result<(), GatewayNotReady> {
        let pod = self
            .live_pods(client)?
            .first()
            .map(pods::name)
            .ok_or(GatewayNotReady::NoPod)?;
        let host = system::backend_host(&self.namespace);
        let listen = SocketAddr::from(([0, 0, 0, 0], names::GATEWAY_HTTPS_PORT));
        let expected = gateway_expected(
            listen,
            self.domains,
            self.routes,
            true,
            &host,
            vec![backend],
        );
        let forward = client
            .port_forward(&self.namespace, &pod, ADMIN_PORT)
            .map_err(GatewayNotReady::Forward)?;
        // A pod that goes is seen by the next reading, which then fails to connect.
        ready::wait_acked(
            forward.addr(),
            &Awaited::Gateway(expected),
            limit,
            stop,
            &mut || None,
        )
        .map_err(|source| GatewayNotReady::NotAcked { pod, source })?;
        Ok(())
    }

    fn roles(&self, client: &BlockingClient) -> Vec<ExternalRole> {
        let gateway_pods = pods::pattern(self.live_pods(client).ok(), "gateway-.*");
        vec![pods::reader_role(
            ChainRole::Gateway.name(),
            Preset::IstioSidecar,
            &[("namespace", &self.namespace), ("pod", &gateway_pods)],
        )]
    }

    /// istiod is the cluster's: the run neither limits nor reads it.
    fn control_plane(&self) -> Option<(Role, Program)> {
        None
    }

    fn probed(&self, client: &BlockingClient) -> Result<(String, String, u16), GatewayNotReady> {
        let pod =
            (self.live_pods(client)?.first().map(pods::name)).ok_or(GatewayNotReady::NoPod)?;
        Ok((self.namespace.clone(), pod, names::GATEWAY_HTTPS_PORT))
    }

    fn counters(&self, client: &BlockingClient) -> Vec<Forward> {
        let live = self.live_pods(client).unwrap_or_default();
        (live.first().map(pods::name))
            .and_then(|pod| client.port_forward(&self.namespace, &pod, ADMIN_PORT).ok())
            .into_iter()
            .collect()
    }

    fn sums_pods(&self) -> bool {
        false
    }

    fn pods(&self, client: &BlockingClient) -> Vec<(&'static str, Vec<Pod>)> {
        vec![("gateway", self.live_pods(client).unwrap_or_default())]
    }

    /// Istio's Gateways, VirtualServices and Secrets for the run's gateway pods and backend.
    fn target(&self) -> Box<dyn Target> {
        let namespace = &self.namespace;
        Box::new(Istio::within(ObjectsScope {
            namespace: namespace.clone(),
            selector: (
                system::GATEWAY_SELECTOR.0.to_string(),
                system::GATEWAY_SELECTOR.1.to_string(),
            ),
            backend_host: Some(system::backend_host(&self.namespace)),
            backend_port: Some(system::CAPTURED),
        }))
    }

    fn applies(&self, name: &str) -> bool {
        name.starts_with("istio-")
    }

    /// Nothing: it is in the run's namespace.
    fn put_back(&self) -> Option<String> {
        None
    }
}
