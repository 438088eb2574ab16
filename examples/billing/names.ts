/**
 * Names the billing function and its CDK wiring must agree on; no dependencies, so the construct
 * imports it without the function's runtime code.
 */

/** The billing consumer's name: its inbox records, and the `consumer` dimension of its metrics. */
export const BILLING_CONSUMER = 'billing';
