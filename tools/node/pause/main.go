// Command pause is the pod sandbox's process: it holds the pod's namespaces open and does nothing
// else until it is told to stop. Built locally (no registry can serve registry.k8s.io/pause here).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	// As PID 1 of the sandbox it also reaps orphans re-parented to it.
	signal.Ignore(syscall.SIGCHLD)
	<-stop
}
