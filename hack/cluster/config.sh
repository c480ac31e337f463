# shellcheck shell=bash disable=SC2154 # the variables are env.sh's and hack/cluster.sh's
# config.sh: defines write_node_config, which writes the configuration of node I of a
# cluster of NODES nodes for one run into its conf directory (sourced by hack/cluster.sh
# up, with env.sh's variables set and ${bin} the binaries).

# write_node_config I NODES
write_node_config() {
	local i=$1 nodes=$2 j
	local conf data logs node_ip node_name pod_cidr role=worker routes=()
	conf="${state}/conf$(node_subdir "${i}")"
	data="${state}/data$(node_subdir "${i}")"
	logs="${state}/logs$(node_subdir "${i}")"
	node_ip=${node_ips[i]} node_name=${node_names[i]} pod_cidr=${node_pod_cidrs[i]}
	((i != 0)) || role=control-plane
	# Each other node's pods are reached through that node, over the link between them.
	for ((j = 0; j < nodes; j++)); do
		((j == i)) || routes+=("'${node_pod_cidrs[j]} via ${node_ips[j]}'")
	done
	mkdir -p "${conf}/cni" "${logs}"

	# Read by node.sh inside the node's namespaces.
	cat >"${conf}/node.env" <<EOF2
bin='${bin}'
goarch='${goarch}'
role='${role}'
node_name='${node_name}'
node_ip='${node_ip}'
api_server_ip='${node_ips[0]}'
pod_cidr='${pod_cidr}'
routes=(${routes[*]})
service_cidr='${service_cidr}'
state='${state}'
conf='${conf}'
data='${data}'
logs='${logs}'
kubelet_kubeconfig='${state}/kubelet-${node_name}.kubeconfig'
pause_image='${pause_image}'
pause_tar='${pause_tar}'
cluster_t0='${cluster_t0}'
EOF2

	# Every path containerd would otherwise take on the host is in the state directory, or
	# in /run, which is a private tmpfs in the node's mount namespace.
	cat >"${conf}/containerd.toml" <<EOF2
version = 3
root = "${data}/containerd"
state = "/run/containerd"
temp = "${data}/tmp"

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins.'io.containerd.internal.v1.opt']
  path = "${data}/containerd-opt"

[plugins.'io.containerd.nri.v1.nri']
  disable = true

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  # No registry: the sandbox image is hack/pause's, imported by node.sh.
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "${pause_image}"

[plugins.'io.containerd.cri.v1.runtime']
  # runc cannot lower a container's oom_score_adj below containerd's own without
  # CAP_SYS_RESOURCE, which machines like CI's do not grant even to root: sandbox
  # creation would fail ("can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = "$(command -v runc)"
      SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["${cni_bin}"]
    conf_dir = "${conf}/cni"
EOF2

	# Pods: a bridge inside the node's network namespace, the pods' gateway; each node
	# allocates from its own range.
	cat >"${conf}/cni/10-fusebox.conflist" <<EOF2
{
  "cniVersion": "1.0.0",
  "name": "fusebox-pods",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "fusebox-pods",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "${pod_cidr}"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "/run/cni-ipam"
      }
    }
  ]
}
EOF2

	# No DNS server runs in the cluster; pods reach Services by their ClusterIP (the
	# KUBERNETES_SERVICE_HOST variables). A name lookup fails at once: nothing answers on
	# a pod's own loopback address.
	echo "nameserver 127.0.0.1" >"${conf}/resolv.conf"

	cat >"${conf}/kubelet.yaml" <<EOF2
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# CI machines of this kind run cgroup v1 (hybrid); the kubelet refuses it by default.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$(node_cgroup_root "${i}")
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
address: ${node_ip}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: ${state}/pki/kubelet-${node_name}.crt
tlsPrivateKeyFile: ${state}/pki/kubelet-${node_name}.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: ${state}/pki/ca.crt}
authorization:
  mode: AlwaysAllow
clusterDomain: cluster.local
resolvConf: ${conf}/resolv.conf
podLogsDir: ${data}/pod-logs
volumePluginDir: ${data}/volume-plugins
failSwapOn: false
# Images are imported, never pulled: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "50Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
  nodefs.inodesFree: "1%"
serializeImagePulls: false
# Shorter than the defaults (1m, 20s, 10s), so that a test sees a ConfigMap volume's
# update, a pod's new status and the node's within seconds.
syncFrequency: 10s
fileCheckFrequency: 10s
nodeStatusUpdateFrequency: 5s
EOF2

	cat >"${conf}/kube-proxy.yaml" <<EOF2
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: ${state}/kube-proxy.kubeconfig
hostnameOverride: ${node_name}
mode: iptables
# Every node's pods: a pod's call to a Service is the cluster's own traffic wherever the
# pod runs, and is not masqueraded.
clusterCIDR: ${cluster_pod_cidr}
bindAddress: ${node_ip}
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# Zero: leave the conntrack table's host-wide sysctls alone.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF2
}
