module github.com/nodesmith/nodesmith/cmd/nodesmithctl

go 1.26.0

require (
	github.com/nodesmith/nodesmith/libs v0.0.0
	github.com/spf13/cobra v1.10.2
	go.yaml.in/yaml/v3 v3.0.5
	sigs.k8s.io/yaml v1.6.0
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
)

replace github.com/nodesmith/nodesmith/libs => ../../libs
