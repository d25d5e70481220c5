module github.com/nodesmith/nodesmith/dev

go 1.26

require (
	github.com/nodesmith/nodesmith/libs v0.0.0
	github.com/nodesmith/nodesmith/proto v0.0.0
	github.com/nodesmith/nodesmith/services/api-gateway v0.0.0
	github.com/nodesmith/nodesmith/services/cloud-adapter v0.0.0
	github.com/nodesmith/nodesmith/services/hook-runner v0.0.0
	github.com/nodesmith/nodesmith/services/lifecycle v0.0.0
	github.com/nodesmith/nodesmith/tools v0.0.0
)

replace (
	github.com/nodesmith/nodesmith/libs => ../libs
	github.com/nodesmith/nodesmith/proto => ../proto
	github.com/nodesmith/nodesmith/services/api-gateway => ../services/api-gateway
	github.com/nodesmith/nodesmith/services/cloud-adapter => ../services/cloud-adapter
	github.com/nodesmith/nodesmith/services/hook-runner => ../services/hook-runner
	github.com/nodesmith/nodesmith/services/lifecycle => ../services/lifecycle
	github.com/nodesmith/nodesmith/tools => ../tools
)
