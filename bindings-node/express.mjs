import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const rateLimit = require('./express.js')

export { rateLimit }
export default rateLimit
