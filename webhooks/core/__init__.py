"""The request core every path shares: an AdmissionReview decoded and checked, its verdict and
patch, the words that describe a change, a pod's defaults, and a workload's pod templates."""
