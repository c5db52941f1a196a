import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const sluicegateFastify = require('./fastify.js')

export { sluicegateFastify }
export default sluicegateFastify
