"""What kube-apiserver runs itself, generated from the configuration: the admission policies
(CEL) that carry the stateless checks and changes, and the matchConditions that send a webhook
only the requests that need the service."""
