package rest

import "github.com/nodesmith/nodesmith/libs/restapi"

// The REST API's JSON bodies are declared once, in libs/restapi, which
// nodesmithctl's client reads them with; these names keep the handlers
// short. testdata/wire.golden pins their bytes.
type (
	Group              = restapi.Group
	InstanceTemplate   = restapi.InstanceTemplate
	NodeTemplate       = restapi.NodeTemplate
	Taint              = restapi.Taint
	AutoscalingOptions = restapi.AutoscalingOptions
	Hook               = restapi.Hook
	Parallelism        = restapi.Parallelism
	GroupList          = restapi.GroupList
	ScaleRequest       = restapi.ScaleRequest

	Instance        = restapi.Instance
	ErrorInfo       = restapi.ErrorInfo
	Transition      = restapi.Transition
	InstanceList    = restapi.InstanceList
	TransitionEntry = restapi.TransitionEntry
	TransitionList  = restapi.TransitionList

	StatusView    = restapi.StatusView
	OrphansView   = restapi.OrphansView
	GroupStatus   = restapi.GroupStatus
	orphanRelease = restapi.OrphanRelease

	TemplateInfo       = restapi.TemplateInfo
	TemplateList       = restapi.TemplateList
	Account            = restapi.Account
	AccountCredentials = restapi.AccountCredentials
	AccountList        = restapi.AccountList
	HookInfo           = restapi.HookInfo
	HookList           = restapi.HookList

	AdoptVM       = restapi.AdoptVM
	AdoptRequest  = restapi.AdoptRequest
	AdoptOutcome  = restapi.AdoptOutcome
	AdoptResponse = restapi.AdoptResponse

	ErrorBody = restapi.ErrorBody

	GroupOfferings          = restapi.GroupOfferings
	OfferingStatus          = restapi.OfferingStatus
	OfferingReason          = restapi.OfferingReason
	UnavailableOffering     = restapi.UnavailableOffering
	UnavailableOfferingList = restapi.UnavailableOfferingList

	WatchSnapshot     = restapi.WatchSnapshot
	WatchDeletedGroup = restapi.WatchDeletedGroup

	GroupSpec            = restapi.GroupSpec
	InstanceTemplateSpec = restapi.InstanceTemplateSpec
	HooksSpec            = restapi.HooksSpec
	HookSpec             = restapi.HookSpec
	AccountSpec          = restapi.AccountSpec
	CredentialsSpec      = restapi.CredentialsSpec
)

// MaxAdoptVMs is the most VMs one adopt request names (lifecycle's bound).
const MaxAdoptVMs = restapi.MaxAdoptVMs

// Event names of the watch stream.
const (
	EventSnapshot     = restapi.EventSnapshot
	EventGroup        = restapi.EventGroup
	EventTransition   = restapi.EventTransition
	EventDeletedGroup = restapi.EventDeletedGroup
	EventBye          = restapi.EventBye
)
