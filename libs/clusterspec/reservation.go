package clusterspec

// MaxReservationNodes bounds a reservation's count (machines). A safety
// bound far above any real reservation (five clusters of MaxClusterNodes),
// checked by the gateway and again by the provisioner, so that a typo or a
// hostile request (two billion machines) cannot be recorded as capacity.
const MaxReservationNodes = 100000
