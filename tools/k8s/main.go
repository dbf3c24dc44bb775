// Command k8s is one binary for the local control plane: it dispatches on the
// name it is called by (a symlink per component), so the Kubernetes and etcd
// packages are compiled and linked once instead of once per component.
//
//	kube-apiserver, kube-controller-manager, kube-scheduler, etcd
//
// Node components (kubelet, kube-proxy) are compiled in with `-tags nodes`
// (see nodes.go): they pull in cAdvisor and the CRI stack, which this
// project's kwok-based cluster does not need.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	_ "time/tzdata" // for CronJob time zones, as the upstream mains do

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

// commands maps a component name to the cobra command its upstream main runs.
// nodes.go adds to it under the `nodes` build tag: that is the extension point.
var commands = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
}

func main() {
	args := os.Args
	name := filepath.Base(args[0])
	if _, ok := commands[name]; !ok && name != "etcd" && len(args) > 1 {
		// `k8s kube-apiserver --flags` works too, without a symlink.
		name, args = args[1], args[1:]
	}
	if name == "etcd" {
		etcdmain.Main(args)
		return
	}
	newCommand, ok := commands[name]
	if !ok {
		names := []string{"etcd"}
		for n := range commands {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "k8s: unknown component %q; call me as one of %v\n", name, names)
		os.Exit(2)
	}
	command := newCommand()
	command.SetArgs(args[1:])
	os.Exit(cli.Run(command))
}
