import postgres from 'postgres';

const sql = postgres('postgres://postgres@127.0.0.1:5432/postgres', { max: 2, onnotice: () => {} });
const reserved = await sql.reserve();
const [{ pid }] = await reserved`select pg_backend_pid() as pid`;
await sql`select pg_terminate_backend(${pid})`;
for (let i = 0; i < 3; i++) {
  try {
    await reserved`select 1`;
    console.log('ok');
  } catch (e) {
    console.log('rejected', (e as any).code);
  }
}
reserved.release();
await sql.end();
console.log('survived');
