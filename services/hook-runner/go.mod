module github.com/nodesmith/nodesmith/services/hook-runner

go 1.26
