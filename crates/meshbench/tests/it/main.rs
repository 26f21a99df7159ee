//! The black-box tests of the binary, one test binary for all of them (one link instead of one
//! per file): each module is what used to be its own file under tests/, `common` their helpers.
//! They start real servers (the backend, nginx, Envoy, istiod, a Kubernetes node) on loopback
//! or in network namespaces they create; scripts/test.sh runs them one at a time.

mod browser;
mod common;

mod agents;
mod answers;
mod arrivals;
mod attribution;
mod backend;
mod backend_replicas;
mod bad_input;
mod changes;
mod changes_truth;
mod churn;
mod cluster_api_only;
mod cluster_attribution;
mod cluster_change_cost;
mod cluster_contour;
mod cluster_detached;
mod cluster_experiment;
mod cluster_stop;
mod cluster_two_nodes;
mod contour_gateway;
mod control_plane;
mod cpu_quota;
mod envoy;
mod envoy_admin;
mod external;
mod gateway;
mod gateway_compare;
mod grafana;
mod grafana_panels;
mod grpc;
mod hostile;
mod http3;
mod install_envoy;
mod invalid_report;
mod istio_attribution;
mod istio_gateway;
mod istio_gateway_injected;
mod istio_injected;
mod istio_plotter;
mod istio_sidecars;
mod k8s;
mod k8s_gateway_cadvisor;
mod k8s_node;
mod k8s_port_forward;
mod lab;
mod metrics;
mod nginx;
mod open_loop_churn;
mod protocols;
mod readme;
mod remote_write;
mod run_backend;
mod self_check;
mod signals;
mod stop_during_setup;
mod store_faults;
mod web;
