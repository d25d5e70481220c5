module github.com/nodesmith/nodesmith/services/api-gateway

go 1.26
