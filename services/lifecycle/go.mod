module github.com/nodesmith/nodesmith/services/lifecycle

go 1.26.0

require (
	github.com/nodesmith/nodesmith/libs v0.0.0
	github.com/nodesmith/nodesmith/proto v0.0.0
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect

replace (
	github.com/nodesmith/nodesmith/libs => ../../libs
	github.com/nodesmith/nodesmith/proto => ../../proto
)
