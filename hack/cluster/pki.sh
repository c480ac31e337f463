#!/usr/bin/env bash
# pki.sh DIR NODES: writes a throwaway certificate authority for one run of the cluster,
# the serving and client certificates of its components (a kubelet's for each of the
# first NODES nodes), the service-account signing key, and a kubeconfig per client
# (DIR/<name>.kubeconfig, DIR/kubelet-<node>.kubeconfig; DIR/kubeconfig is the admin's).
# ECDSA P-256 throughout: it takes milliseconds, where RSA keys take seconds.
set -euo pipefail
# shellcheck source=env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
dir=$1 nodes=${2:-1}
pki="${dir}/pki"
mkdir -p "${pki}"
cd "${pki}"

key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1.key" 2>/dev/null; }
key ca
openssl req -x509 -new -key ca.key -out ca.crt -days 30 -subj "/CN=fusebox-cluster-ca" 2>/dev/null

# cert NAME SUBJECT [SANS]: a certificate for a server and client (the components are both).
cert() {
	local name=$1 subj=$2 sans=${3:-} ext
	key "${name}"
	ext="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth,clientAuth"
	[[ -z ${sans} ]] || ext+="
subjectAltName=${sans}"
	openssl req -new -key "${name}.key" -subj "${subj}" 2>/dev/null |
		openssl x509 -req -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -out "${name}.crt" \
			-extfile <(echo "${ext}") 2>/dev/null
}

cert kube-apiserver "/CN=kube-apiserver" \
	"IP:${node_ip},IP:127.0.0.1,IP:${api_service_ip},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
cert admin "/O=system:masters/CN=fusebox-cluster-admin"
cert kube-apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
cert kube-controller-manager "/CN=system:kube-controller-manager"
cert kube-scheduler "/CN=system:kube-scheduler"
cert kube-proxy "/CN=system:kube-proxy"
# Each kubelet as its own node (the Node authorizer lets a kubelet change only its own
# Node and the status of pods bound to it), serving on its own node's address.
kubelets=()
for ((i = 0; i < nodes; i++)); do
	cert "kubelet-${node_names[i]}" "/O=system:nodes/CN=system:node:${node_names[i]}" "IP:${node_ips[i]},DNS:${node_names[i]}"
	kubelets+=("kubelet-${node_names[i]}")
done
# The key pair that signs and verifies service-account tokens (bound tokens included).
key service-account
openssl ec -in service-account.key -pubout -out service-account.pub 2>/dev/null
rm -f ca.srl

for user in admin kube-controller-manager kube-scheduler kube-proxy "${kubelets[@]}"; do
	out="${dir}/${user}.kubeconfig"
	[[ ${user} != admin ]] || out="${dir}/kubeconfig"
	cat >"${out}" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: fusebox-cluster
  cluster:
    server: https://${node_ip}:6443
    certificate-authority: ${pki}/ca.crt
users:
- name: ${user}
  user:
    client-certificate: ${pki}/${user}.crt
    client-key: ${pki}/${user}.key
contexts:
- name: fusebox-cluster
  context: {cluster: fusebox-cluster, user: ${user}}
current-context: fusebox-cluster
KUBECONFIG
done
chmod 600 "${pki}"/*.key
