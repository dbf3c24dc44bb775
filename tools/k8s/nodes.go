//go:build nodes

package main

import (
	"context"

	"github.com/spf13/cobra"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// Built with `go build -tags nodes` (make K8S_TAGS=nodes k8s-tools): real
// node components from the same release, for a cluster with real kubelets.
func init() {
	commands["kubelet"] = func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) }
	commands["kube-proxy"] = proxy.NewProxyCommand
}
