import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const { registerLimiters } = require('./prometheus.js')

export { registerLimiters }
