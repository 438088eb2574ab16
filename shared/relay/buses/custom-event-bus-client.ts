/**
 * The smallest client for EventBridge's Custom Event Bus (the EventsV2 API, version 2025-05-15):
 * PutEvents only, assembled from the AWS SDK's own parts the way a generated `@aws-sdk/client-*`
 * package assembles itself (see `@aws-sdk/client-eventbridge`'s `EventBridgeClient`,
 * `runtimeConfig.js` and `commandBuilder.js`): `@smithy/core`'s Smithy RPC v2 CBOR protocol driven
 * by operation and structure schemas, the SigV4 signer, the default credential chain, the SDK's
 * region, endpoint, retry and abort handling. No CBOR and no signing is written here.
 *
 * There is no `@aws-sdk/client-eventbridgev2` in the npm registry yet. This module's surface —
 * `EventsV2Client`, `EventsV2PutEventsCommand` and their input and output shapes — mirrors what the
 * generated client will export (`EventBridgeV2Client`, `PutEventsCommand`), so the official package
 * replaces this one module.
 *
 * What each wire detail was checked against (docs/configuration.md#custom-event-bus-eventsv2):
 * - shapes and member names (`PutEventsRequest {EventBusArn, Entries, DeduplicationConfiguration}`,
 *   `PutEventsRequestEntry {Source, DetailType, Detail, Resources, Time, SystemMetadata}`,
 *   `PutEventsSystemMetadata {EventGroupId, DeduplicationId}`, `PutEventsResponse
 *   {FailedEntryCount, Entries}`, `PutEventsResultEntry {EventId, SequenceNumber, SuccessCode,
 *   ErrorCode, ErrorMessage}`, `SequenceNumber` a string, `Time` a timestamp): the Rust crate
 *   `aws-sdk-eventbridgev2`'s serializers and deserializers (awslabs/aws-sdk-rust,
 *   sdk/eventbridgev2/src/protocol_serde/shape_put_events_*.rs) and the generated TypeScript schemas
 *   in aws/aws-sdk-js-v3 clients/client-eventbridgev2/src/schemas/schemas_0.ts;
 * - namespace `com.amazonaws.eventbridgev2`, service shape `AWSEventsV2` (so the path is
 *   `/service/AWSEventsV2/operation/PutEvents`), SDK service id `EventBridgeV2`, SigV4 signing name
 *   `events`: that client's runtimeConfig.shared.ts, auth/httpAuthSchemeProvider.ts and
 *   endpoint/EndpointParameters.ts; the path also in the C++ SDK's EventBridgeV2Client.cpp;
 * - the endpoint `https://eventsv2.{region}.{dnsSuffix}`, or `https://{account}.eventsv2…` when the
 *   bus ARN names the account: that client's endpoint rules (endpoint/bdd.ts);
 * - the endpoint variable: the SDK builds it from the service id (`getEndpointUrlConfig` in
 *   `@smithy/core/endpoints`): `AWS_ENDPOINT_URL_EVENTBRIDGEV2`, else `AWS_ENDPOINT_URL`.
 */

import {
  createDefaultUserAgentProvider,
  getHostHeaderPlugin,
  getLoggerPlugin,
  getRecursionDetectionPlugin,
  NODE_REGION_CONFIG_FILE_OPTIONS,
  NODE_REGION_CONFIG_OPTIONS,
  parseArn,
  partition,
  resolveHostHeaderConfig,
  resolveUserAgentConfig,
} from '@aws-sdk/core/client';
import { AwsSdkSigV4Signer, resolveAwsSdkSigV4Config } from '@aws-sdk/core/httpAuthSchemes';
import { AwsSmithyRpcV2CborProtocol } from '@aws-sdk/core/protocols';
import { defaultProvider as credentialDefaultProvider } from '@aws-sdk/credential-provider-node';
import {
  DefaultIdentityProviderConfig,
  getHttpAuthSchemeEndpointRuleSetPlugin,
  getHttpSigningPlugin,
} from '@smithy/core';
import { Sha256 } from '@smithy/core/checksum';
import {
  Client,
  getSmithyContext,
  makeBuilder,
  NoOpLogger,
  normalizeProvider,
  ServiceException,
} from '@smithy/core/client';
import { loadConfig, resolveRegionConfig } from '@smithy/core/config';
import { getEndpointPlugin, resolveEndpointConfig } from '@smithy/core/endpoints';
import { getContentLengthPlugin, parseUrl } from '@smithy/core/protocols';
import {
  DEFAULT_RETRY_MODE,
  getRetryPlugin,
  NODE_MAX_ATTEMPT_CONFIG_OPTIONS,
  resolveRetryConfig,
} from '@smithy/core/retry';
import { getSchemaSerdePlugin, TypeRegistry } from '@smithy/core/schema';
import { calculateBodyLength, fromBase64, fromUtf8, toBase64, toUtf8 } from '@smithy/core/serde';
import { NodeHttpHandler, type NodeHttpHandlerOptions, streamCollector } from '@smithy/node-http-handler';

/** The Smithy namespace of the EventsV2 model. */
export const EVENTSV2_NAMESPACE = 'com.amazonaws.eventbridgev2';
/** The service shape's name: the RPC v2 CBOR path is `/service/AWSEventsV2/operation/<Operation>`. */
export const EVENTSV2_SERVICE = 'AWSEventsV2';
/** The SDK service id: it names the endpoint variable `AWS_ENDPOINT_URL_EVENTBRIDGEV2`. */
export const EVENTSV2_SERVICE_ID = 'EventBridgeV2';
/** The SDK's endpoint variable for this service (`AWS_ENDPOINT_URL_` + the service id, upper case). */
export const EVENTSV2_ENDPOINT_ENV = 'AWS_ENDPOINT_URL_EVENTBRIDGEV2';
/** SigV4 signing name: the IAM namespace is shared with classic EventBridge (`events:PutEvents`). */
export const EVENTSV2_SIGNING_NAME = 'events';
/** The API version of the Custom Event Bus. */
export const EVENTSV2_API_VERSION = '2025-05-15';

/** One event of a PutEvents request. */
export interface EventsV2PutEventsRequestEntry {
  Source: string;
  DetailType: string;
  /** A JSON object, as text. */
  Detail?: string;
  Resources?: string[];
  Time?: Date;
  SystemMetadata?: {
    /** FIFO subscribers receive one group's events in publish order. */
    EventGroupId?: string;
    /** A second entry with the same id within 5 minutes is answered `DEDUPLICATED`, not delivered. ≤ 128 characters. */
    DeduplicationId?: string;
  };
}

/** PutEvents input: the bus by ARN and 1–100 entries. */
export interface EventsV2PutEventsInput {
  EventBusArn: string;
  Entries: EventsV2PutEventsRequestEntry[];
}

/** One entry of the answer, in request order: `SuccessCode` (and `EventId`) or `ErrorCode`. */
export interface EventsV2PutEventsResultEntry {
  EventId?: string;
  /** The bus's sequence number for the event (a string in the model). */
  SequenceNumber?: string;
  /** `PUBLISHED`, or `DEDUPLICATED` when an entry with its DeduplicationId was accepted within 5 minutes. */
  SuccessCode?: string;
  ErrorCode?: string;
  ErrorMessage?: string;
}

/** PutEvents output; `$metadata` as every SDK output. */
export interface EventsV2PutEventsOutput {
  FailedEntryCount?: number;
  Entries?: EventsV2PutEventsResultEntry[];
  $metadata: { httpStatusCode?: number; requestId?: string; attempts?: number };
}

/** The success codes of a result entry. */
export const EVENTSV2_SUCCESS_CODES = { published: 'PUBLISHED', deduplicated: 'DEDUPLICATED' } as const;

// ---- schemas: the subset of the model PutEvents needs (static schema tuples of @smithy/core/schema:
// 3 = structure, 1 = list, 9 = operation, -3 = error; member types 0 string, 1 number, 4 timestamp,
// 64|0 list of strings; the trailing number of a structure is its count of required members).
const n0 = EVENTSV2_NAMESPACE;
const PutEventsSystemMetadata$ = [
  3,
  n0,
  'PutEventsSystemMetadata',
  0,
  ['EventGroupId', 'DeduplicationId'],
  [0, 0],
];
const PutEventsRequestEntry$ = [
  3,
  n0,
  'PutEventsRequestEntry',
  0,
  ['Source', 'DetailType', 'Detail', 'Resources', 'Time', 'SystemMetadata'],
  [0, 0, 0, 64 | 0, 4, () => PutEventsSystemMetadata$],
  2,
];
const PutEventsRequestEntryList = [1, n0, 'PutEventsRequestEntryList', 0, () => PutEventsRequestEntry$];
const PutEventsRequest$ = [
  3,
  n0,
  'PutEventsRequest',
  0,
  ['EventBusArn', 'Entries'],
  [0, () => PutEventsRequestEntryList],
  2,
];
const PutEventsResultEntry$ = [
  3,
  n0,
  'PutEventsResultEntry',
  0,
  ['EventId', 'SequenceNumber', 'SuccessCode', 'ErrorCode', 'ErrorMessage'],
  [0, 0, 0, 0, 0],
];
const PutEventsResultEntryList = [1, n0, 'PutEventsResultEntryList', 0, () => PutEventsResultEntry$];
const PutEventsResponse$ = [
  3,
  n0,
  'PutEventsResponse',
  0,
  ['FailedEntryCount', 'Entries'],
  [1, () => PutEventsResultEntryList],
];
const PutEvents$ = [9, n0, 'PutEvents', 0, () => PutEventsRequest$, () => PutEventsResponse$];

/** Base of the modelled errors; `name` is the error shape's name, `$metadata.httpStatusCode` its status. */
export class EventsV2ServiceException extends ServiceException {
  static override shapeId = `smithy.ts.sdk.synthetic.${n0}#EventBridgeV2ServiceException`;
}

const syntheticRegistry = TypeRegistry.for(`smithy.ts.sdk.synthetic.${n0}`);
syntheticRegistry.registerError(
  [-3, `smithy.ts.sdk.synthetic.${n0}`, 'EventBridgeV2ServiceException', 0, [], []] as never,
  EventsV2ServiceException,
);
const errorRegistry = TypeRegistry.for(n0);
// The errors PutEvents can answer with as a whole: exactly the operation's `@throws` list in the
// generated client (aws/aws-sdk-js-v3 clients/client-eventbridgev2/src/commands/PutEventsCommand.ts:
// InternalException, InvalidStateException, ResourceNotFoundException, AccessDeniedException,
// InvalidInputException, ThrottlingException), each with its schema's HTTP status
// (src/schemas/schemas_0.ts). LimitExceededException is a shape of the model but not an error of
// PutEvents (only of the create operations), so it is not registered. InvalidStateException (409)
// is a bus still being created: publisher.ts's requestFailure treats it as back-pressure.
// The SDK's retry strategy reads the name (ThrottlingException is a throttling error) and the status
// (500 is transient); an error not listed here still arrives, as EventsV2ServiceException.
for (const [name, status, fault] of [
  ['ThrottlingException', 429, 'client'],
  ['InternalException', 500, 'server'],
  ['InvalidInputException', 400, 'client'],
  ['InvalidStateException', 409, 'client'],
  ['AccessDeniedException', 403, 'client'],
  ['ResourceNotFoundException', 404, 'client'],
] as const) {
  const ctor = class extends EventsV2ServiceException {
    constructor(options: object) {
      super({ name, $fault: fault, ...options } as never);
      this.name = name;
    }
  };
  errorRegistry.registerError(
    [-3, n0, name, { error: fault, httpError: status }, ['Message'], [0]] as never,
    ctor,
  );
}

const endpointParams = {
  UseFIPS: { type: 'builtInParams', name: 'useFipsEndpoint' },
  Endpoint: { type: 'builtInParams', name: 'endpoint' },
  Region: { type: 'builtInParams', name: 'region' },
  UseDualStack: { type: 'builtInParams', name: 'useDualstackEndpoint' },
} as const;

const command = makeBuilder(
  endpointParams,
  EVENTSV2_SERVICE,
  'EventBridgeV2Client',
  getEndpointPlugin as never,
);

/** PutEvents on a Custom Event Bus: `client.send(new EventsV2PutEventsCommand(input), { abortSignal })`. */
export class EventsV2PutEventsCommand extends (command(
  { EventBusArn: { type: 'contextParams', name: 'EventBusArn' } } as never,
  () => [],
  'PutEvents',
  PutEvents$ as never,
) as unknown as new (
  input: EventsV2PutEventsInput,
) => { readonly input: EventsV2PutEventsInput }) {}

/** The endpoint for a region and, when the bus ARN names one, its account (endpoint/bdd.ts's rules, FIPS and dual-stack left out). */
function resolveEventsV2Endpoint(params: { Region?: string; Endpoint?: string; EventBusArn?: string }): {
  url: URL;
} {
  if (params.Endpoint) return { url: new URL(params.Endpoint) };
  if (!params.Region) throw new Error('EventsV2: a region is required to find the endpoint');
  const dnsSuffix = (partition(params.Region) as { dnsSuffix: string }).dnsSuffix;
  const arn = params.EventBusArn ? parseArn(params.EventBusArn) : null;
  const account =
    arn && arn.service === 'events' && /^\d{12}$/.test(arn.accountId) ? `${arn.accountId}.` : '';
  return { url: new URL(`https://${account}eventsv2.${params.Region}.${dnsSuffix}`) };
}

/** Options of {@link EventsV2Client}: the SDK's usual ones; each defaults as in any `@aws-sdk/client-*`. */
export interface EventsV2ClientConfig {
  /** Default: `AWS_REGION`, then the shared config file. */
  region?: string | (() => Promise<string>);
  /** Default: `AWS_ENDPOINT_URL_EVENTBRIDGEV2`, then `AWS_ENDPOINT_URL`, then the service's regional endpoint. */
  endpoint?: string;
  /** Default: the Node default chain (`@aws-sdk/credential-provider-node`). */
  credentials?:
    | { accessKeyId: string; secretAccessKey: string; sessionToken?: string }
    | (() => Promise<{ accessKeyId: string; secretAccessKey: string; sessionToken?: string }>);
  /** Attempts per call, SDK retries included. Default: `AWS_MAX_ATTEMPTS`, else 3. */
  maxAttempts?: number;
  /** Options of the Node HTTP handler (`connectionTimeout`, `requestTimeout`, `throwOnRequestTimeout`…), or a handler. */
  requestHandler?: NodeHttpHandlerOptions | NodeHttpHandler;
  /** A logger for the SDK's debug output. */
  logger?: {
    debug(...a: unknown[]): void;
    info(...a: unknown[]): void;
    warn(...a: unknown[]): void;
    error(...a: unknown[]): void;
  };
}

/** The resolved configuration parts callers use (as on the SDK's clients). */
export interface EventsV2ResolvedConfig {
  region: () => Promise<string>;
  credentials: () => Promise<{ accessKeyId: string; secretAccessKey: string }>;
  [key: string]: unknown;
}

type SendOptions = { abortSignal?: AbortSignal; requestTimeout?: number };

/**
 * A client of the Custom Event Bus's PutEvents, with the SDK client's `send`, `middlewareStack`,
 * `config` and `destroy`.
 * @example
 * const client = new EventsV2Client({ region: 'eu-west-1' });
 * const out = await client.send(new EventsV2PutEventsCommand({ EventBusArn, Entries }), { abortSignal });
 */
export class EventsV2Client extends (Client as unknown as new (
  config: object,
) => {
  send(command: unknown, options?: SendOptions): Promise<unknown>;
  destroy(): void;
  middlewareStack: {
    add(mw: unknown, options: object): void;
    remove(name: string): boolean;
    use(plugin: unknown): void;
  };
}) {
  readonly config: EventsV2ResolvedConfig;

  constructor(configuration: EventsV2ClientConfig = {}) {
    const logger = configuration.logger ?? new NoOpLogger();
    const loaderConfig = { logger };
    const base = {
      apiVersion: EVENTSV2_API_VERSION,
      base64Decoder: fromBase64,
      base64Encoder: toBase64,
      disableHostPrefix: false,
      endpointProvider: resolveEventsV2Endpoint,
      extensions: [],
      httpAuthSchemeProvider: (authParameters: { region?: string }) => [
        {
          schemeId: 'aws.auth#sigv4',
          signingProperties: { name: EVENTSV2_SIGNING_NAME, region: authParameters.region },
          // The signer reads the client's config and the call's context from these.
          propertiesExtractor: (config: unknown, context: unknown) => ({
            signingProperties: { config, context },
          }),
        },
      ],
      httpAuthSchemes: [
        {
          schemeId: 'aws.auth#sigv4',
          identityProvider: (ipc: { getIdentityProvider(id: string): unknown }) =>
            ipc.getIdentityProvider('aws.auth#sigv4'),
          signer: new AwsSdkSigV4Signer(),
        },
      ],
      protocol: AwsSmithyRpcV2CborProtocol,
      protocolSettings: {
        defaultNamespace: n0,
        errorTypeRegistries: [syntheticRegistry, errorRegistry],
        version: EVENTSV2_API_VERSION,
        serviceTarget: EVENTSV2_SERVICE,
      },
      serviceId: EVENTSV2_SERVICE_ID,
      sha256: Sha256,
      urlParser: parseUrl,
      utf8Decoder: fromUtf8,
      utf8Encoder: toUtf8,
      ...configuration,
      logger,
      runtime: 'node',
      authSchemePreference: async () => [],
      bodyLengthChecker: calculateBodyLength,
      credentialDefaultProvider,
      defaultUserAgentProvider: createDefaultUserAgentProvider({
        serviceId: EVENTSV2_SERVICE_ID,
        clientVersion: '0.0.0',
      }),
      maxAttempts: configuration.maxAttempts ?? loadConfig(NODE_MAX_ATTEMPT_CONFIG_OPTIONS as never, {}),
      region:
        configuration.region ??
        loadConfig(NODE_REGION_CONFIG_OPTIONS as never, {
          ...NODE_REGION_CONFIG_FILE_OPTIONS,
          ...loaderConfig,
        }),
      requestHandler: NodeHttpHandler.create(configuration.requestHandler as NodeHttpHandlerOptions),
      retryMode: DEFAULT_RETRY_MODE,
      streamCollector,
      useDualstackEndpoint: false,
      useFipsEndpoint: false,
      defaultSigningName: EVENTSV2_SIGNING_NAME,
    };
    super(base);
    // The same resolution steps, in the same order, as a generated client's constructor.
    const c1 = resolveUserAgentConfig(base as never);
    const c2 = resolveRetryConfig(c1 as never);
    const c3 = resolveRegionConfig(c2 as never);
    const c4 = resolveHostHeaderConfig(c3 as never);
    const c5 = resolveEndpointConfig(c4 as never);
    const c6 = resolveAwsSdkSigV4Config(c5 as never);
    const config = Object.assign(c6 as object, { authSchemePreference: normalizeProvider([]) });
    this.config = config as unknown as EventsV2ResolvedConfig;
    this.middlewareStack.use(getSchemaSerdePlugin(config as never));
    this.middlewareStack.use(getRetryPlugin(config as never));
    this.middlewareStack.use(getContentLengthPlugin(config as never));
    this.middlewareStack.use(getHostHeaderPlugin(config as never));
    this.middlewareStack.use(getLoggerPlugin(config as never));
    this.middlewareStack.use(getRecursionDetectionPlugin(config as never));
    this.middlewareStack.use(
      getHttpAuthSchemeEndpointRuleSetPlugin(
        config as never,
        {
          httpAuthSchemeParametersProvider: async (
            cfg: { region: () => Promise<string> },
            context: unknown,
          ) => ({
            operation: getSmithyContext(context as never).operation as string,
            region: await normalizeProvider(cfg.region)(),
          }),
          identityProviderConfigProvider: async (cfg: { credentials: unknown }) =>
            new DefaultIdentityProviderConfig({ 'aws.auth#sigv4': cfg.credentials } as never),
        } as never,
      ),
    );
    this.middlewareStack.use(getHttpSigningPlugin(config as never));
  }

  /** Sends PutEvents. @throws {EventsV2ServiceException} (or a transport error) when the request failed as a whole */
  override send(command: EventsV2PutEventsCommand, options?: SendOptions): Promise<EventsV2PutEventsOutput> {
    return super.send(command, options) as Promise<EventsV2PutEventsOutput>;
  }
}

/** The official client's input and output type names. */
export type {
  EventsV2ClientConfig as EventBridgeV2ClientConfig,
  EventsV2PutEventsInput as PutEventsCommandInput,
  EventsV2PutEventsOutput as PutEventsCommandOutput,
  EventsV2PutEventsRequestEntry as PutEventsRequestEntry,
  EventsV2PutEventsResultEntry as PutEventsResultEntry,
};
/**
 * The names `@aws-sdk/client-eventbridgev2` exports: code written against these switches to the
 * official client by changing its import line alone.
 */
/** The official client's base exception name. */
export {
  EventsV2Client as EventBridgeV2Client,
  EventsV2PutEventsCommand as PutEventsCommand,
  EventsV2ServiceException as EventBridgeV2ServiceException,
};
